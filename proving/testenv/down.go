package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Down tears down the run in runDir: every process, pod, mount, network
// device, iptables chain, cgroup and sysctl change it recorded, then the
// folder itself. It works on a run whose owner was killed, and on a run
// already half torn down; it is a no-op when runDir does not exist.
func Down(ctx context.Context, runDir string, progress io.Writer) error {
	runDir, err := filepath.Abs(runDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(runDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	st, err := loadState(runDir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		st = newState(runDir) // nothing recorded: only mounts and the folder
	}
	errs, podErr := stopProcesses(ctx, paths{runDir}, st)
	errs = append(errs, undoHostChanges(runDir, st)...)
	// Never remove a folder that still has something mounted below it.
	if mps, _ := mountsUnder(runDir); len(mps) == 0 {
		if err := os.RemoveAll(runDir); err != nil {
			errs = append(errs, err)
		}
	}
	if left := leftovers(runDir, st); len(left) > 0 {
		errs = append(errs, fmt.Errorf("left behind: %s", strings.Join(left, "; ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("test cluster down: %w", errors.Join(append(errs, podErr)...))
	}
	if podErr != nil {
		// The pods are gone with their processes, mounts and devices
		// (checked above): what failed was only the polite way.
		fmt.Fprintf(progress, "test cluster: %v; nothing was left behind\n", podErr)
	}
	fmt.Fprintf(progress, "test cluster: %s torn down\n", runDir)
	return nil
}

// stopProcesses stops every process of the run, and the pods: the kubelet
// first, so that nothing restarts the pods it removes, then the pods
// through the CRI, containerd, whatever still uses its socket (shims) or
// runs in the run's cgroups, and every other recorded process, newest
// first. It returns what failed, and apart from that what failed in
// removing the pods through the CRI: the caller's check for leftovers
// (processes, mounts, devices, cgroups) says whether that mattered.
func stopProcesses(ctx context.Context, p paths, st *state) (errs []error, podErr error) {
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	byName := map[string]process{}
	for _, pr := range st.Processes {
		byName[pr.Name] = pr
	}
	stop := func(name string) {
		if pr, ok := byName[name]; ok {
			note(stopProcess(pr, 15*time.Second))
		}
	}

	// The second node's first, then the first's: the kubelet, kube-proxy,
	// the pods, containerd and its shims.
	second := secondNode(p)
	nodes := []struct {
		suffix string
		dir    paths
		wrap   []string
	}{{"-node2", second.dir, inSecondNetNS()}, {"", p, nil}}
	for _, n := range nodes {
		stop("kubelet" + n.suffix)
		stop("kube-proxy" + n.suffix)
		if _, err := os.Stat(n.dir.containerd()); err == nil {
			podErr = errors.Join(podErr, removeAllPods(ctx, n.dir, p, byName["containerd"+n.suffix], n.suffix, n.wrap))
		}
		stop("containerd" + n.suffix)
		for _, pid := range processesUsing(n.dir.containerdSocket()) {
			note(killPID(pid))
		}
	}
	note(killCgroupProcesses(st))
	for i := len(st.Processes) - 1; i >= 0; i-- {
		note(stopProcess(st.Processes[i], 15*time.Second))
	}
	return errs, podErr
}

// undoHostChanges undoes what the run changed on the host, once its
// processes are stopped: iptables chains, network devices and namespaces,
// mounts under runDir, sysctls, cgroups and the paths it created outside
// runDir. It returns what failed.
func undoHostChanges(runDir string, st *state) []error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range removeChains(st) {
		note(e)
	}
	for _, l := range st.Links {
		if linkExists(l) {
			note(run("ip", "link", "del", l))
		}
	}
	for _, e := range removeNetNS(st) {
		note(e)
	}
	for _, e := range removeOwnNetNS(st) {
		note(e)
	}
	note(unmountUnder(runDir))
	for _, e := range restoreSysctls(st) {
		note(e)
	}
	for _, e := range removeCgroups(st) {
		note(e)
	}
	for _, e := range removeCreatedPaths(st) {
		note(e)
	}
	return errs
}

// removeAllPods removes every pod sandbox of the node whose folder is dir
// through the CRI. When the node's containerd is gone (its owner was killed
// mid-way) a containerd is started on the same state just for this, run by
// wrap (the second node's: in its network namespace, if still there), so
// that the CNI teardown still runs; its log is run's containerd-cleanup plus
// suffix.
func removeAllPods(ctx context.Context, dir, run paths, ctrd process, suffix string, wrap []string) error {
	sock := dir.containerdSocket()
	cfg := dir.join("containerd", "config.toml")
	if ctrd.PID != 0 && ctrd.alive() {
		return removePods(ctx, sock)
	}
	if _, err := os.Stat(cfg); err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir.containerd(), "root", "io.containerd.grpc.v1.cri", "sandboxes")); err != nil {
		return nil // no pod ever ran
	}
	if len(wrap) > 0 {
		if _, err := os.Stat(filepath.Join(netnsDir, secondNetNS)); err != nil {
			return nil // the namespace, and the pods' network with it, is gone
		}
	}
	logf, err := os.OpenFile(run.log("containerd-cleanup"+suffix), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	argv := append(wrap, "containerd", "--config="+cfg)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start containerd for cleanup: %w", err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := criReady(cctx, sock)
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return removePods(ctx, sock)
}

func killPID(pid int) error {
	st, err := procStartTime(pid)
	if err != nil {
		return nil
	}
	return stopProcess(process{Name: "containerd-shim", PID: pid, StartTime: st}, 5*time.Second)
}

// killCgroupProcesses kills what still runs in the cgroups the run created:
// container processes whose shim is gone.
func killCgroupProcesses(st *state) error {
	var pids []int
	for _, root := range st.Cgroups {
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}
