package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const helperEnv = "DRAINGATE_TEST_HELPER_RUNDIR"

// TestHelperClusterUp is not a test: TestDownAfterKilledRun runs the test
// binary again with only this function, as the run that gets killed.
func TestHelperClusterUp(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process for TestDownAfterKilledRun")
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{RunDir: dir, Progress: os.Stderr})
	if err != nil {
		fmt.Println("FAILED", strings.ReplaceAll(err.Error(), "\n", " | "))
		os.Exit(1)
	}
	// A pod behind a Service: mounts, a network namespace, a veth and
	// kube-proxy rules that Down must remove.
	labels := map[string]string{"app": "leftover"}
	_, err = c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "leftover", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
		}}},
	}, metav1.CreateOptions{})
	if err == nil {
		_, err = c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "leftover"},
			Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
	}
	for err == nil {
		var p *corev1.Pod
		p, err = c.Client.CoreV1().Pods("default").Get(ctx, "leftover", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The second node, with a pod of its own that the host reaches
	// through the node's namespace: a namespace, a veth, cgroups and
	// routes that Down must remove too.
	if err == nil {
		err = c.AddNode(ctx)
	}
	if err == nil {
		_, err = c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "leftover2", Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:    SecondNodeName,
				Tolerations: []corev1.Toleration{{Key: SecondNodeTaint, Operator: corev1.TolerationOpExists}},
				Containers: []corev1.Container{{
					Name: "app", Image: TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
				}},
			},
		}, metav1.CreateOptions{})
	}
	for err == nil {
		var p *corev1.Pod
		p, err = c.Client.CoreV1().Pods("default").Get(ctx, "leftover2", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			err = httpOK(ctx, http.DefaultClient, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		fmt.Println("FAILED", err)
		os.Exit(1)
	}
	fmt.Println("READY")
	select {} // until killed
}

// TestDownAfterKilledRun kills a run (SIGKILL, no cleanup of its own) and
// one of its containerd shims while its cluster has a pod behind a Service,
// then checks that Down leaves no
// process, mount, network device, network namespace, iptables chain, cgroup,
// sysctl change or folder of that run behind.
func TestDownAfterKilledRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	if linkExists(BridgeName) {
		t.Skip("a test cluster is running on this host; this test needs the host to itself")
	}
	var opts Options
	if err := opts.fill(); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "draingate-down-")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "run")
	sysBefore := map[string]string{}
	for _, n := range sysctls {
		if v, err := readSysctl(n); err == nil {
			sysBefore[n] = v
		}
	}
	netnsBefore, _ := os.ReadDir(netnsDir)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperClusterUp$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, "DRAINGATE_BIN_DIR="+opts.BinDir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened, leave the host clean for the next test.
		Down(context.Background(), dir, os.Stderr)
		if mps, _ := mountsUnder(base); len(mps) == 0 {
			os.RemoveAll(base)
		}
	})
	sc := bufio.NewScanner(stdout)
	ready := false
	for sc.Scan() {
		line := sc.Text()
		if line == "READY" {
			ready = true
			break
		}
		if strings.HasPrefix(line, "FAILED") {
			t.Fatalf("helper run: %s", line)
		}
	}
	if !ready {
		cmd.Process.Kill()
		t.Fatal("helper run ended without a cluster")
	}
	st, err := loadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The run really changed the host: otherwise the checks below prove nothing.
	if mps, _ := mountsUnder(dir); len(mps) == 0 {
		t.Fatal("no mounts under the run folder while the cluster runs")
	}
	if !linkExists(BridgeName) {
		t.Fatal("no bridge while the cluster runs")
	}
	if first := firstBridgeIPv4(t); first != HostIP {
		t.Fatalf("bridge %s's first IPv4 address is %s; want %s, the CNI bridge plugin's gateway", BridgeName, first, HostIP)
	}
	held := hostAddrs(t)
	for _, ip := range bridgeExtraIPs() {
		if !held[ip] {
			t.Fatalf("load balancer node address %s missing while the cluster runs", ip)
		}
	}
	if n := len(processesUsing(paths{dir}.containerdSocket())); n == 0 {
		t.Fatal("no containerd shim while a pod runs")
	}
	if n := len(processesUsing(secondNode(paths{dir}).dir.containerdSocket())); n == 0 {
		t.Fatal("no containerd shim on the second node while its pod runs")
	}
	if left := ownNetNSLeft(st); len(left) == 0 || !linkExists(secondVeth) {
		t.Fatal("the second node's namespace or veth is missing while it runs")
	}
	if chains, _ := ourChains("iptables", "nat"); !slices.Contains(chains, "KUBE-SERVICES") {
		t.Fatalf("kube-proxy chains missing while the cluster runs: %v", chains)
	}

	// A shim that dies under containerd (seen in CI: "ttrpc: closed" on
	// the pod's stop) must not fail the teardown nor leave anything.
	for _, pid := range processesUsing(paths{dir}.containerdSocket()) {
		syscall.Kill(pid, syscall.SIGKILL)
		break
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	alive := 0
	for _, p := range st.Processes {
		if p.alive() {
			alive++
		}
	}
	if alive == 0 {
		t.Fatal("killing the run stopped its components: nothing left for Down to prove")
	}

	if err := Down(context.Background(), dir, os.Stderr); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if left := leftovers(dir, st); len(left) > 0 {
		t.Errorf("left behind: %s", strings.Join(left, "; "))
	}
	if pids := processesMentioning(dir); len(pids) > 0 {
		t.Errorf("processes still mention the run folder: %v", pids)
	}
	for n, v := range sysBefore {
		if now, _ := readSysctl(n); now != v {
			t.Errorf("sysctl %s is %s, was %s before the run", n, now, v)
		}
	}
	netnsAfter, _ := os.ReadDir(netnsDir)
	if len(netnsAfter) > len(netnsBefore) {
		t.Errorf("network namespaces before %d, after %d", len(netnsBefore), len(netnsAfter))
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("run folder %s still exists", dir)
	}
	if out, _ := exec.Command("ip", "-o", "link").Output(); strings.Contains(string(out), "veth") {
		t.Errorf("veth devices remain:\n%s", out)
	}
	held = hostAddrs(t)
	for _, ip := range append([]string{HostIP}, bridgeExtraIPs()...) {
		if held[ip] {
			t.Errorf("address %s is still on the host", ip)
		}
	}
}

// hostAddrs returns the IP addresses of every network device of the host.
func hostAddrs(t *testing.T) map[string]bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out[n.IP.String()] = true
		}
	}
	return out
}

// firstBridgeIPv4 returns the bridge's first IPv4 address, in the kernel's
// order, which is what the CNI bridge plugin checks.
func firstBridgeIPv4(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", BridgeName).Output()
	if err != nil {
		t.Fatalf("ip addr show dev %s: %v", BridgeName, err)
	}
	// "5: draingate0    inet 10.244.0.1/24 brd ... scope global draingate0"
	f := strings.Fields(string(out))
	if len(f) < 4 || f[2] != "inet" {
		t.Fatalf("ip addr show dev %s: unexpected output %q", BridgeName, out)
	}
	ip, _, _ := strings.Cut(f[3], "/")
	return ip
}

// processesMentioning lists PIDs with an argument under dir.
func processesMentioning(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(b), dir) && !zombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Bad setups fail at once with one clear sentence, leaving nothing behind.

func TestStartRefusesPortInUse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("preflight checks root first")
	}
	if linkExists(BridgeName) {
		t.Skip("a test cluster is running on this host")
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", etcdClientPort))
	if err != nil {
		t.Skipf("cannot hold the etcd port for the test: %v", err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "run")
	bin := fakeBinDir(t)
	_, err = Start(context.Background(), Options{RunDir: dir, BinDir: bin, Progress: os.Stderr})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port 127.0.0.1:%d (etcd) is in use", etcdClientPort)) {
		t.Fatalf("err = %v, want the etcd port named", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("run folder created despite the refusal")
	}
}

func TestStartRefusesMissingBinaries(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("preflight checks root first")
	}
	dir := filepath.Join(t.TempDir(), "run")
	_, err := Start(context.Background(), Options{RunDir: dir, BinDir: t.TempDir(), Progress: os.Stderr})
	if err == nil || !strings.Contains(err.Error(), "make tools") || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Fatalf("err = %v, want the missing binaries and `make tools`", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("run folder created despite the refusal")
	}
}

func TestStartRefusesMissingPackages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("preflight checks root first")
	}
	t.Setenv("PATH", t.TempDir()) // no containerd, runc, iptables, ip
	_, err := Start(context.Background(), Options{RunDir: filepath.Join(t.TempDir(), "run"), BinDir: fakeBinDir(t), Progress: os.Stderr})
	if err == nil || !strings.Contains(err.Error(), "containerd (package containerd)") || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("err = %v, want the missing packages and `make deps`", err)
	}
}

func TestStartRefusesNonRoot(t *testing.T) {
	if os.Getenv("DRAINGATE_TEST_NONROOT") == "1" {
		_, err := Start(context.Background(), Options{RunDir: filepath.Join(os.TempDir(), "never"), BinDir: os.TempDir(), Progress: os.Stderr})
		fmt.Println("ERR:", err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("runs the check as an unprivileged user, which needs root to arrange")
	}
	// Run this test binary again as nobody.
	dir, err := os.MkdirTemp("", "draingate-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	self, _ := os.ReadFile(os.Args[0])
	bin := filepath.Join(dir, "testenv.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestStartRefusesNonRoot$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DRAINGATE_TEST_NONROOT=1", "DRAINGATE_CLUSTER_DIR="+dir, "DRAINGATE_BIN_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "must run as root") {
		t.Fatalf("as nobody: %s", out)
	}
}

// fakeBinDir has empty files for every required binary: enough for the
// checks that run before anything starts.
func fakeBinDir(t *testing.T) string {
	dir := t.TempDir()
	for _, b := range requiredBinaries {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
