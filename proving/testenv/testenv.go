package testenv

// This file is long because it is the cluster's start and stop in order
// (etcd, API server, controllers, kubelet, kube-proxy, CoreDNS), each step
// waiting on the one before; splitting it would hide the order.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options tunes Start. The zero value is what tests want.
type Options struct {
	// RunDir holds all of the run's state: default $DRAINGATE_CLUSTER_DIR,
	// else .cluster at the module root.
	RunDir string
	// BinDir holds the Kubernetes, etcd and CoreDNS binaries that
	// hack/build-tools.sh built: default $DRAINGATE_BIN_DIR, else
	// .tools/bin at the module root.
	BinDir string
	// Progress receives one line per step; default os.Stderr.
	Progress io.Writer
}

// Cluster is a running one-node cluster.
type Cluster struct {
	// RunDir is the run folder; Kubeconfig the admin kubeconfig in it.
	RunDir     string
	Kubeconfig string
	// Config is an admin rest.Config; Client a clientset made from it.
	Config *rest.Config
	Client kubernetes.Interface
	// BinDir is where the cluster's binaries are.
	BinDir string
	// Owned is true when this process started the cluster and Stop tears it
	// down; false when Start attached to a cluster already running.
	Owned bool

	paths    paths
	moduleRT string
	st       *state
	procs    map[string]*running
	progress io.Writer
	started  time.Time
}

// requiredBinaries come from hack/build-tools.sh.
var requiredBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns"}

// hostCommands come from Debian packages (hack/install-deps.sh).
var hostCommands = []struct{ cmd, pkg string }{
	{"containerd", "containerd"},
	{"containerd-shim-runc-v2", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{"iptables", "iptables"},
	{"ip", "iproute2"},
	{"/usr/lib/cni/bridge", "containernetworking-plugins"},
	{"/usr/lib/cni/host-local", "containernetworking-plugins"},
}

func (o *Options) fill() error {
	root, rootErr := ModuleRoot()
	if o.RunDir == "" {
		o.RunDir = os.Getenv("DRAINGATE_CLUSTER_DIR")
	}
	if o.RunDir == "" {
		if rootErr != nil {
			return rootErr
		}
		o.RunDir = filepath.Join(root, ".cluster")
	}
	if o.BinDir == "" {
		o.BinDir = os.Getenv("DRAINGATE_BIN_DIR")
	}
	if o.BinDir == "" {
		if rootErr != nil {
			return rootErr
		}
		o.BinDir = filepath.Join(root, ".tools", "bin")
	}
	if o.Progress == nil {
		o.Progress = os.Stderr
	}
	var err error
	if o.RunDir, err = filepath.Abs(o.RunDir); err != nil {
		return err
	}
	o.BinDir, err = filepath.Abs(o.BinDir)
	return err
}

// ModuleRoot finds the draingate module's folder from the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module draingate.dev/draingate\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the draingate module: run from the repository or set DRAINGATE_CLUSTER_DIR and DRAINGATE_BIN_DIR")
		}
		dir = parent
	}
}

// Start returns a ready cluster: the node Ready, CoreDNS answering and a
// ServiceAccount token usable. If a healthy cluster already runs in the run
// folder it attaches to it; a stale run there is cleaned first. On failure
// nothing is left running and the error names the part and its log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if c, ok := attach(ctx, opts); ok {
		// A cluster started by an older version may lack them.
		if err := ensureLBNodeIPs(); err != nil {
			return nil, fmt.Errorf("test cluster: attached to the cluster running in %s, but could not add the load balancer node addresses to %s: %w", c.RunDir, BridgeName, err)
		}
		c.logf("attached to the cluster running in %s", c.RunDir)
		return c, nil
	}
	if err := prepareRun(ctx, opts); err != nil {
		return nil, err
	}
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if derr := Down(context.Background(), c.RunDir, io.Discard); derr != nil {
				err = fmt.Errorf("%w\n(cleanup after the failure also failed: %v)", err, derr)
			}
		}
	}()
	if err := c.record(); err != nil {
		return nil, err
	}
	if err := c.startParts(ctx); err != nil {
		return nil, err
	}
	c.logf("ready in %.1fs; export KUBECONFIG=%s", time.Since(c.started).Seconds(), c.Kubeconfig)
	return c, nil
}

// prepareRun makes sure a new run can start: the host has what it needs
// (preflight), a stale run in the run folder is torn down, and the
// cluster's ports are free.
func prepareRun(ctx context.Context, opts Options) error {
	if err := preflight(opts); err != nil {
		return err
	}
	if _, err := os.Stat(opts.RunDir); err == nil {
		fmt.Fprintf(opts.Progress, "test cluster: cleaning a stale run in %s\n", opts.RunDir)
		if err := Down(ctx, opts.RunDir, opts.Progress); err != nil {
			return fmt.Errorf("clean stale run: %w", err)
		}
	}
	return checkPorts()
}

// newCluster is the Cluster a new run starts, owned by this process, with
// its log folder made and its state not yet recorded.
func newCluster(opts Options) (*Cluster, error) {
	root, _ := ModuleRoot()
	c := &Cluster{
		RunDir: opts.RunDir, BinDir: opts.BinDir, Owned: true,
		paths: paths{opts.RunDir}, moduleRT: root, procs: map[string]*running{},
		progress: opts.Progress, started: time.Now(),
	}
	c.Kubeconfig = c.paths.kubeconfig()
	if err := os.MkdirAll(c.paths.logs(), 0o755); err != nil {
		return nil, err
	}
	c.st = newState(c.RunDir)
	return c, nil
}

// startParts starts the cluster's parts in order, each ready before the
// next starts. A part's failure comes back as a PartError naming the part
// and its log, unless it already is one.
func (c *Cluster) startParts(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"certificates", c.writeConfig},
		{"network", c.setupNetwork},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"controllers", c.startControllers},
		{"containerd", c.startContainerd},
		{"images", c.loadBaseImages},
		{"kubelet", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
		{"coredns", c.startCoreDNS},
		{"service account token", c.checkServiceAccountToken},
	}
	for _, s := range steps {
		t0 := time.Now()
		if err := s.fn(ctx); err != nil {
			var pe *PartError
			if errors.As(err, &pe) {
				return err
			}
			return &PartError{Part: s.name, Err: err, Log: c.logFor(s.name)}
		}
		c.logf("%s ready (%.1fs)", s.name, time.Since(t0).Seconds())
	}
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.progress, "test cluster: "+format+"\n", args...)
}

// Stop tears the cluster down if this process started it.
func (c *Cluster) Stop(ctx context.Context) error {
	if c == nil || !c.Owned {
		return nil
	}
	return Down(ctx, c.RunDir, c.progress)
}

// attach returns the cluster already running in the run folder, if healthy.
func attach(ctx context.Context, opts Options) (*Cluster, bool) {
	p := paths{opts.RunDir}
	st, err := loadState(opts.RunDir)
	if err != nil {
		return nil, false
	}
	for _, pr := range st.Processes {
		if !pr.alive() {
			return nil, false
		}
	}
	c := &Cluster{RunDir: opts.RunDir, BinDir: opts.BinDir, Kubeconfig: p.kubeconfig(), paths: p, st: st, procs: map[string]*running{}, progress: opts.Progress}
	c.moduleRT, _ = ModuleRoot()
	if err := c.loadClient(); err != nil {
		return nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c.nodeReady(cctx) != nil {
		return nil, false
	}
	return c, true
}

func preflight(o Options) error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	var missing []string
	for _, b := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("test cluster: %s missing from %s: build them with `make tools` (hack/build-tools.sh)", strings.Join(missing, ", "), o.BinDir)
	}
	var pkgs []string
	for _, hc := range hostCommands {
		if _, err := exec.LookPath(hc.cmd); err != nil {
			pkgs = append(pkgs, fmt.Sprintf("%s (package %s)", hc.cmd, hc.pkg))
		}
	}
	if len(pkgs) > 0 {
		return fmt.Errorf("test cluster: not installed: %s: install them with `make deps` (hack/install-deps.sh)", strings.Join(pkgs, ", "))
	}
	sock := paths{o.RunDir}.containerdSocket()
	if len(sock) > 100 {
		return fmt.Errorf("test cluster: run folder path too long for a unix socket (%s): set DRAINGATE_CLUSTER_DIR to a shorter path", sock)
	}
	if linkExists(BridgeName) {
		if _, err := os.Stat(filepath.Join(o.RunDir, stateFile)); err != nil {
			return fmt.Errorf("test cluster: network device %s exists but no run in %s owns it: another test cluster may be running from another folder; stop it with its `make cluster-down`", BridgeName, o.RunDir)
		}
	}
	return checkRoutes()
}

func checkPorts() error {
	for _, l := range listeners {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRNOTAVAIL) {
				continue // the bridge address does not exist yet: nobody can hold it
			}
			return fmt.Errorf("test cluster: port %s (%s) is in use: stop what listens there (see `ss -ltnp`), or `make cluster-down` if it is a stale test cluster", l.addr, l.part)
		}
		ln.Close()
	}
	return nil
}

// checkRoutes refuses to start when the host already routes the cluster's
// ranges, or the load balancer nodes' addresses, somewhere else: pods,
// Services and those addresses would shadow real networks.
func checkRoutes() error {
	out, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return fmt.Errorf("ip route: %w", err)
	}
	_, pods, _ := net.ParseCIDR(ClusterCIDR)
	_, svcs, _ := net.ParseCIDR(ServiceCIDR)
	ranges := []*net.IPNet{pods, svcs}
	for _, ip := range bridgeExtraIPs() {
		ranges = append(ranges, &net.IPNet{IP: net.ParseIP(ip), Mask: net.CIDRMask(32, 32)})
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "default" || strings.Contains(line, "dev "+BridgeName) {
			continue
		}
		ip, n, err := net.ParseCIDR(f[0])
		if err != nil {
			if ip = net.ParseIP(f[0]); ip == nil {
				continue
			}
			n = &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}
		}
		for _, r := range ranges {
			if r.Contains(n.IP) || n.Contains(r.IP) {
				return fmt.Errorf("test cluster: the host already routes %s, which overlaps the cluster's %s", f[0], r)
			}
		}
	}
	return nil
}

func (c *Cluster) record() error {
	if err := c.st.update(func(*state) {}); err != nil {
		return err
	}
	if err := recordSysctls(c.st); err != nil {
		return err
	}
	if err := recordAbsent(c.st); err != nil {
		return err
	}
	return recordChains(c.st)
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.BinDir, name) }

func (c *Cluster) writeConfig(context.Context) error {
	p, err := newPKI(c.paths.pki())
	if err != nil {
		return err
	}
	if err := p.serving("apiserver", apiserverNames(), serviceIPs()); err != nil {
		return err
	}
	ids := []identity{
		{file: "admin", user: "draingate-admin", groups: []string{"system:masters"}},
		{file: "kube-controller-manager", user: "system:kube-controller-manager"},
		{file: "kube-scheduler", user: "system:kube-scheduler"},
		{file: "kubelet", user: "system:node:" + NodeName, groups: []string{"system:nodes"}},
		{file: "kube-proxy", user: "system:kube-proxy"},
		{file: "apiserver-kubelet-client", user: "kube-apiserver-kubelet-client", groups: []string{"system:masters"}},
	}
	for _, id := range ids {
		if err := p.client(id); err != nil {
			return err
		}
		kc := kubeconfig(apiserverURL(), p.path("ca.crt"), p.path(id.file+".crt"), p.path(id.file+".key"))
		dst := c.paths.componentKubeconfig(id.file)
		if id.file == "admin" {
			dst = c.paths.kubeconfig()
		}
		if err := writeFile(dst, kc); err != nil {
			return err
		}
	}
	// Pods with dnsPolicy Default get this: no upstream resolver, the
	// network is closed.
	if err := writeFile(c.paths.join("resolv.conf"), "options ndots:1\n"); err != nil {
		return err
	}
	if err := writeNodeConfig(c.paths, firstNode(c.paths)); err != nil {
		return err
	}
	return c.loadClient()
}

func (c *Cluster) loadClient() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	cl, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.Config, c.Client = cfg, cl
	return nil
}

// setupNetwork creates the bridge with the host's address on it before
// anything listens there, then the load balancer nodes' addresses
// (LBNodeIPs) and their clients' (LBClientIPs), routes the Service range to it (so a Service IP never leaves
// the host, even before kube-proxy programs it), and drops any forwarded pod
// traffic bound for other networks. The bridge is recorded before it exists,
// so Down deletes it, and the addresses with it, whatever happens next.
func (c *Cluster) setupNetwork(context.Context) error {
	if err := c.st.update(func(s *state) { s.Links = append(s.Links, BridgeName) }); err != nil {
		return err
	}
	cmds := [][]string{
		{"ip", "link", "add", BridgeName, "type", "bridge"},
		// First: the CNI bridge plugin wants its gateway to be the
		// bridge's first IPv4 address.
		{"ip", "addr", "add", HostIP + "/24", "dev", BridgeName},
	}
	for _, ip := range bridgeExtraIPs() {
		cmds = append(cmds, []string{"ip", "addr", "add", ip + "/32", "dev", BridgeName})
	}
	cmds = append(cmds, [][]string{
		{"ip", "link", "set", BridgeName, "up"},
		{"ip", "route", "add", ServiceCIDR, "dev", BridgeName, "src", HostIP},
		{"iptables", "-w", "-N", "DRAINGATE-FORWARD"},
		{"iptables", "-w", "-A", "DRAINGATE-FORWARD", "-i", BridgeName, "!", "-o", BridgeName, "-j", "DROP"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-j", "DRAINGATE-FORWARD"},
	}...)
	for _, cmd := range cmds {
		if err := run(cmd[0], cmd[1:]...); err != nil {
			return err
		}
	}
	// Pod-to-Service-to-pod traffic on one bridge must pass iptables.
	return writeSysctl("net/bridge/bridge-nf-call-iptables", "1")
}

// ensureLBNodeIPs adds to the bridge of a running cluster whichever of
// LBNodeIPs and LBClientIPs it lacks. Each goes after HostIP, which stays the first address
// (see LBNodeIPs).
func ensureLBNodeIPs() error {
	br, err := net.InterfaceByName(BridgeName)
	if err != nil {
		return err
	}
	addrs, err := br.Addrs()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			have[n.String()] = true
		}
	}
	for _, ip := range bridgeExtraIPs() {
		if have[ip+"/32"] {
			continue
		}
		// replace: no error if it appeared since.
		if err := run("ip", "addr", "replace", ip+"/32", "dev", BridgeName); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	peer := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	client := fmt.Sprintf("http://127.0.0.1:%d", etcdClientPort)
	if _, err := c.spawn("etcd", c.bin("etcd"),
		"--name=draingate", "--data-dir="+c.paths.join("etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=draingate="+peer, "--unsafe-no-fsync=true",
		"--listen-metrics-urls=", "--log-level=warn"); err != nil {
		return err
	}
	return c.waitReady(ctx, "etcd", 30*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, client+"/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	pki := c.paths.pki()
	f := func(n string) string { return filepath.Join(pki, n) }
	if _, err := c.spawn("kube-apiserver", c.bin("kube-apiserver"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClientPort),
		"--bind-address="+HostIP, fmt.Sprintf("--secure-port=%d", apiserverPort), "--advertise-address="+HostIP,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--tls-cert-file="+f("apiserver.crt"), "--tls-private-key-file="+f("apiserver.key"),
		"--client-ca-file="+f("ca.crt"),
		"--kubelet-client-certificate="+f("apiserver-kubelet-client.crt"), "--kubelet-client-key="+f("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+f("sa.pub"), "--service-account-signing-key-file="+f("sa.key"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--v=1"); err != nil {
		return err
	}
	return c.waitReady(ctx, "kube-apiserver", 90*time.Second, func(ctx context.Context) error {
		_, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

func (c *Cluster) startControllers(ctx context.Context) error {
	pki := c.paths.pki()
	cm := c.paths.componentKubeconfig("kube-controller-manager")
	if _, err := c.spawn("kube-controller-manager", c.bin("kube-controller-manager"),
		"--kubeconfig="+cm, "--authentication-kubeconfig="+cm, "--authorization-kubeconfig="+cm,
		"--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
		"--controllers=*", "--use-service-account-credentials=true",
		"--root-ca-file="+filepath.Join(pki, "ca.crt"),
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--cluster-name=draingate", "--v=1"); err != nil {
		return err
	}
	sc := c.paths.componentKubeconfig("kube-scheduler")
	if _, err := c.spawn("kube-scheduler", c.bin("kube-scheduler"),
		"--kubeconfig="+sc, "--authentication-kubeconfig="+sc, "--authorization-kubeconfig="+sc,
		"--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false", "--v=1"); err != nil {
		return err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := c.waitReady(ctx, "kube-controller-manager", 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, insecure, "https://127.0.0.1:10257/healthz")
	}); err != nil {
		return err
	}
	return c.waitReady(ctx, "kube-scheduler", 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, insecure, "https://127.0.0.1:10259/healthz")
	})
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	if _, err := c.spawn("containerd", "containerd", "--config="+c.paths.join("containerd", "config.toml")); err != nil {
		return err
	}
	return c.waitReady(ctx, "containerd", 30*time.Second, func(ctx context.Context) error {
		return criReady(ctx, c.paths.containerdSocket())
	})
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	if _, err := c.spawn("kubelet", c.bin("kubelet"),
		"--config="+c.paths.join("kubelet-config.yaml"),
		"--kubeconfig="+c.paths.componentKubeconfig("kubelet"),
		"--root-dir="+c.paths.kubelet(), "--cert-dir="+c.paths.join("kubelet-pki"),
		"--hostname-override="+NodeName, "--node-ip="+HostIP, "--v=1"); err != nil {
		return err
	}
	return c.waitReady(ctx, "kubelet", 90*time.Second, c.nodeReady)
}

func (c *Cluster) nodeReady(ctx context.Context) error { return c.nodeReadyNamed(ctx, NodeName) }

func (c *Cluster) nodeReadyNamed(ctx context.Context, name string) error {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s", name, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	if _, err := c.spawn("kube-proxy", c.bin("kube-proxy"),
		"--config="+c.paths.join("kube-proxy-config.yaml"), "--v=1"); err != nil {
		return err
	}
	return c.waitReady(ctx, "kube-proxy", 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, "http://127.0.0.1:10256/healthz")
	})
}

// checkServiceAccountToken proves the token path pods use: the service
// account controller made the default ServiceAccount, a token can be
// requested for it, and the API server authenticates that token.
func (c *Cluster) checkServiceAccountToken(ctx context.Context) error {
	var token string
	err := c.waitReady(ctx, "service account token", 60*time.Second, func(ctx context.Context) error {
		tr, err := c.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		token = tr.Status.Token
		return nil
	})
	if err != nil {
		return err
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = token
	cl, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	rev, err := cl.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("authenticate with a service account token: %w", err)
	}
	if u := rev.Status.UserInfo.Username; u != "system:serviceaccount:default:default" {
		return fmt.Errorf("service account token authenticated as %q", u)
	}
	return nil
}

func httpOK(ctx context.Context, cl *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
