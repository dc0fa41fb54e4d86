package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// running is a component process started by this run.
type running struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (r *running) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// spawn starts one component with its output in its log. The process gets
// its own session so a terminal's Ctrl-C reaches only the owner, which
// then stops everything in order.
func (c *Cluster) spawn(name, bin string, args ...string) (*running, error) {
	logf, err := os.OpenFile(c.paths.log(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, &PartError{Part: name, Err: err}
	}
	st, err := procStartTime(cmd.Process.Pid)
	if err != nil {
		st = 0
	}
	r := &running{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		logf.Close()
		close(r.done)
	}()
	c.procs[name] = r
	return r, c.st.update(func(s *state) {
		s.Processes = append(s.Processes, process{Name: name, PID: cmd.Process.Pid, StartTime: st})
	})
}

// waitReady polls check until it succeeds, the component's process exits,
// the timeout passes or ctx ends; failures name the part and its log.
func (c *Cluster) waitReady(ctx context.Context, part string, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if r := c.procs[part]; r != nil && r.exited() {
			return &PartError{Part: part, Err: fmt.Errorf("exited: %v", r.err), Log: c.paths.log(part)}
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return &PartError{Part: part, Err: fmt.Errorf("not ready after %s: %w", timeout, last), Log: c.logFor(part)}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) logFor(part string) string {
	p := c.paths.log(part)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// stopProcess ends a recorded process: SIGTERM, then SIGKILL after grace.
// It acts only if the PID still belongs to the process we started.
func stopProcess(p process, grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p.alive() {
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	for range 100 {
		if !p.alive() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("process %s (pid %d) did not exit", p.Name, p.PID)
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// processesUsing lists PIDs whose command line mentions path: the containerd
// shims of a run name its containerd socket. Used only to find processes the
// run started indirectly.
func processesUsing(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if arg == path {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// PartError says which part of the cluster failed and where its log is.
type PartError struct {
	Part string
	Err  error
	Log  string
}

func (e *PartError) Error() string {
	msg := fmt.Sprintf("test cluster: %s: %v", e.Part, e.Err)
	if e.Log != "" {
		msg += fmt.Sprintf("\n--- last lines of %s ---\n%s", e.Log, tail(e.Log, 25))
	}
	return msg
}

func (e *PartError) Unwrap() error { return e.Err }

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var errNotRoot = errors.New("the test cluster runs a kubelet and containerd and must run as root (try: sudo make test)")

// RestartAPIServer stops the API server this process started (SIGTERM by
// its recorded PID, SIGKILL after 30 s), keeps it down for down, starts it
// again with the same flags and waits until it is ready: a control-plane
// restart, as an upgrade does. It returns how long the stop took. A
// cluster this process attached to (make cluster-up) is not its to
// restart.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) (stopping time.Duration, err error) {
	const name = "kube-apiserver"
	r := c.procs[name]
	if r == nil {
		return 0, errors.New("restart the API server: this process attached to a running cluster and did not start it")
	}
	start := time.Now()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	stopping = time.Since(start)
	pid := r.cmd.Process.Pid
	delete(c.procs, name)
	if err := c.st.update(func(s *state) {
		s.Processes = slices.DeleteFunc(s.Processes, func(p process) bool { return p.Name == name && p.PID == pid })
	}); err != nil {
		return stopping, err
	}
	select {
	case <-ctx.Done():
		return stopping, ctx.Err()
	case <-time.After(down):
	}
	return stopping, c.startAPIServer(ctx)
}
