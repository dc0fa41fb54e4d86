package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// state is everything a run changed on the host, written to the run folder
// after every change so that Down can undo a run whose owner was killed.
type state struct {
	mu   sync.Mutex
	path string

	// Processes we started, with their kernel start time so that a recycled
	// PID is never mistaken for ours.
	Processes []process `json:"processes"`
	// Sysctls holds the value of each sysctl before the run touched it.
	Sysctls map[string]string `json:"sysctls"`
	// Created lists paths outside the run folder that did not exist before
	// the run and that the run's components create (removed on Down).
	Created []string `json:"created"`
	// Links lists network devices the run created.
	Links []string `json:"links"`
	// Chains lists, per iptables binary and table, the KUBE-/CNI-/DRAINGATE-
	// chains that existed before the run: Down never touches those.
	Chains map[string][]string `json:"chains"`
	// Cgroups lists cgroup folders that did not exist before the run.
	Cgroups []string `json:"cgroups"`
	// NetNS lists network namespace files that existed before the run.
	NetNS []string `json:"netns"`
	// OwnNetNS lists network namespaces the run made (the second node's).
	OwnNetNS []string `json:"ownNetns,omitempty"`
}

type process struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

const stateFile = "state.json"

func loadState(runDir string) (*state, error) {
	s := &state{path: filepath.Join(runDir, stateFile)}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	return s, nil
}

func newState(runDir string) *state {
	return &state{path: filepath.Join(runDir, stateFile), Sysctls: map[string]string{}, Chains: map[string][]string{}}
}

// update applies f and writes the state file atomically.
func (s *state) update(f func(*state)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

func (s *state) processes() []process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]process(nil), s.Processes...)
}

// procStartTime reads field 22 of /proc/PID/stat: the process's start time in
// clock ticks since boot. It identifies a process together with its PID.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it don't.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether p is still the process we started and has not
// exited: a zombie waiting for its (new) parent to reap it counts as gone.
func (p process) alive() bool {
	st, err := procStartTime(p.PID)
	return err == nil && st == p.StartTime && !zombie(p.PID)
}
