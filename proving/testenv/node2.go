package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// A second node, for what one node cannot show: a pod that is the last of
// its Service on its node while its peers serve on another (Local traffic
// policy). It is a kubelet, a containerd and a kube-proxy of their own in a
// network namespace of their own, so that kube-proxy's rules, the node's
// ports and its pods' bridge are its own; a veth on the cluster's bridge
// joins it to the host, which routes between the nodes' pod ranges. Its
// pods' cgroups live under a cgroup root of their own. It registers with a
// NoSchedule taint: only pods that tolerate SecondNodeTaint run there, so
// that every other test and lab scenario sees the one node it always did.
const (
	// SecondNodeName is the node AddNode starts.
	SecondNodeName = "draingate-node2"
	// SecondNodeIP is its InternalIP, inside its network namespace.
	SecondNodeIP = "10.245.2.2"
	// SecondNodeTaint is the key of its NoSchedule taint.
	SecondNodeTaint = "draingate.dev/second-node"

	secondPodSubnet = "10.244.1.0/24"
	secondGateway   = "10.244.1.1"
	secondBridge    = "draingate1" // inside the namespace
	secondNetNS     = "draingate-node2"
	secondVeth      = "dg-node2" // the host's end, on BridgeName
	secondCgroup    = "draingate-node2"
)

// secondNode is the second node's setting in the run folder p.
func secondNode(p paths) node {
	return node{name: SecondNodeName, ip: SecondNodeIP, bridge: secondBridge, gateway: secondGateway,
		podSubnet: secondPodSubnet, dir: paths{p.join("node2")}, proxyHealthz: SecondNodeIP + ":10256",
		cgroupRoot: "/" + secondCgroup, taint: SecondNodeTaint}
}

// The second node's processes, as the run's state names them.
const (
	secondContainerd = "containerd-node2"
	secondKubelet    = "kubelet-node2"
	secondKubeProxy  = "kube-proxy-node2"
)

// inSecondNetNS runs argv inside the second node's network namespace only
// (not `ip netns exec`, which also gives the process a mount namespace of
// its own: the kubelet's volume mounts must be the ones containerd sees).
func inSecondNetNS(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + filepath.Join(netnsDir, secondNetNS)}, argv...)
}

// AddNode starts the second node, once per run: it returns at once when it
// is already Ready. Down stops it with the rest of the run. Images already
// loaded are imported into its containerd; later ones go to both nodes.
func (c *Cluster) AddNode(ctx context.Context) (err error) {
	if c.secondNodeRunning() && c.nodeReadyNamed(ctx, SecondNodeName) == nil {
		return nil
	}
	if c.secondNodeRecorded() {
		return fmt.Errorf("test cluster: the second node of the run in %s is half started or died: tear the cluster down (`make cluster-down`) and start again", c.RunDir)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fmt.Errorf("test cluster: nsenter (package util-linux) is not installed: install it with `make deps`")
	}
	n := secondNode(c.paths)
	t0 := time.Now()
	steps := []struct {
		name string
		fn   func(context.Context, node) error
	}{
		{"node2 network", c.secondNetwork},
		{"node2 cgroups", c.secondCgroups},
		{"node2 config", c.secondConfig},
		{secondContainerd, c.secondContainerd},
		{secondKubelet, c.secondKubelet},
		{secondKubeProxy, c.secondKubeProxy},
	}
	for _, s := range steps {
		if err := s.fn(ctx, n); err != nil {
			var pe *PartError
			if errors.As(err, &pe) {
				return err
			}
			return &PartError{Part: s.name, Err: err, Log: c.logFor(s.name)}
		}
	}
	c.logf("second node %s ready (%.1fs)", SecondNodeName, time.Since(t0).Seconds())
	return nil
}

// secondNodeRecorded says whether the run ever started the second node.
func (c *Cluster) secondNodeRecorded() bool {
	for _, p := range c.st.Processes {
		if p.Name == secondContainerd {
			return true
		}
	}
	return false
}

// secondNodeRunning says whether its processes all run.
func (c *Cluster) secondNodeRunning() bool {
	alive := map[string]bool{}
	for _, p := range c.st.Processes {
		alive[p.Name] = p.alive()
	}
	return alive[secondContainerd] && alive[secondKubelet] && alive[secondKubeProxy]
}

// secondNetwork makes the node's namespace and its veth on the cluster's
// bridge: the node owns SecondNodeIP and routes everything through the
// host's HostIP; the host reaches the node's address and its pod range
// through the bridge, and forwards between the nodes (net.ipv4.ip_forward,
// recorded at the run's start and restored by Down). The veth and the
// namespace are recorded before they exist.
func (c *Cluster) secondNetwork(_ context.Context, n node) error {
	if err := c.st.update(func(s *state) {
		s.Links = append(s.Links, secondVeth)
		s.OwnNetNS = append(s.OwnNetNS, secondNetNS)
	}); err != nil {
		return err
	}
	ns := []string{"ip", "-n", secondNetNS}
	cmds := [][]string{
		{"ip", "netns", "add", secondNetNS},
		{"ip", "link", "add", secondVeth, "type", "veth", "peer", "name", "eth0", "netns", secondNetNS},
		{"ip", "link", "set", secondVeth, "master", BridgeName, "up"},
		append(ns, "addr", "add", n.ip+"/32", "dev", "eth0"),
		append(ns, "link", "set", "lo", "up"),
		append(ns, "link", "set", "eth0", "up"),
		append(ns, "route", "add", HostIP+"/32", "dev", "eth0"),
		append(ns, "route", "add", "default", "via", HostIP, "dev", "eth0"),
		{"ip", "route", "add", n.ip + "/32", "dev", BridgeName, "src", HostIP},
		{"ip", "route", "add", n.podSubnet, "via", n.ip, "dev", BridgeName},
		// The namespace's own sysctls go with it.
		inSecondNetNS("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward; f=/proc/sys/net/bridge/bridge-nf-call-iptables; [ ! -e $f ] || echo 1 > $f"),
	}
	for _, cmd := range cmds {
		if err := run(cmd[0], cmd[1:]...); err != nil {
			return err
		}
	}
	return writeSysctl("net/ipv4/ip_forward", "1")
}

// secondCgroups makes the kubelet's cgroup root in every hierarchy,
// recorded first so that Down removes it with everything below. A new
// cpuset gets its parent's CPUs and memory nodes, or nothing could run in
// it.
func (c *Cluster) secondCgroups(context.Context, node) error {
	var dirs []string
	for _, ctrl := range cgroupControllers() {
		d := filepath.Join(ctrl, secondCgroup)
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			dirs = append(dirs, d)
		}
	}
	if err := c.st.update(func(s *state) { s.Cgroups = append(s.Cgroups, dirs...) }); err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		if filepath.Base(filepath.Dir(d)) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// secondConfig writes the node's configuration and its kubelet's client
// certificate, signed by the run's CA.
func (c *Cluster) secondConfig(_ context.Context, n node) error {
	p, err := loadPKI(c.paths.pki())
	if err != nil {
		return err
	}
	id := identity{file: "kubelet-node2", user: "system:node:" + n.name, groups: []string{"system:nodes"}}
	if err := p.client(id); err != nil {
		return err
	}
	kc := kubeconfig(apiserverURL(), p.path("ca.crt"), p.path(id.file+".crt"), p.path(id.file+".key"))
	if err := writeFile(c.paths.componentKubeconfig(id.file), kc); err != nil {
		return err
	}
	return writeNodeConfig(c.paths, n)
}

// loadPKI reads the run's CA, to sign more certificates with it.
func loadPKI(dir string) (*pki, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s: no PEM block", name)
		}
		return blk.Bytes, nil
	}
	certDER, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	keyDER, err := read("ca.key")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(keyDER)
	if err != nil {
		return nil, err
	}
	return &pki{dir: dir, caCert: cert, caKey: (*ecdsa.PrivateKey)(key)}, nil
}

func (c *Cluster) secondContainerd(ctx context.Context, n node) error {
	argv := inSecondNetNS("containerd", "--config="+n.dir.join("containerd", "config.toml"))
	if _, err := c.spawn(secondContainerd, argv[0], argv[1:]...); err != nil {
		return err
	}
	if err := c.waitReady(ctx, secondContainerd, 30*time.Second, func(ctx context.Context) error {
		return criReady(ctx, n.dir.containerdSocket())
	}); err != nil {
		return err
	}
	// Every image the run loaded so far; importTarball sends later ones
	// to both nodes.
	tars, _ := filepath.Glob(filepath.Join(c.paths.images(), "*.tar"))
	for _, t := range tars {
		if err := importInto(ctx, n.dir.containerdSocket(), filepath.Base(t), t); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) secondKubelet(ctx context.Context, n node) error {
	argv := inSecondNetNS(c.bin("kubelet"),
		"--config="+n.dir.join("kubelet-config.yaml"),
		"--kubeconfig="+c.paths.componentKubeconfig("kubelet-node2"),
		"--root-dir="+n.dir.kubelet(), "--cert-dir="+n.dir.join("kubelet-pki"),
		"--hostname-override="+n.name, "--node-ip="+n.ip, "--v=1")
	if _, err := c.spawn(secondKubelet, argv[0], argv[1:]...); err != nil {
		return err
	}
	return c.waitReady(ctx, secondKubelet, 90*time.Second, func(ctx context.Context) error {
		return c.nodeReadyNamed(ctx, n.name)
	})
}

func (c *Cluster) secondKubeProxy(ctx context.Context, n node) error {
	argv := inSecondNetNS(c.bin("kube-proxy"), "--config="+n.dir.join("kube-proxy-config.yaml"), "--v=1")
	if _, err := c.spawn(secondKubeProxy, argv[0], argv[1:]...); err != nil {
		return err
	}
	return c.waitReady(ctx, secondKubeProxy, 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, "http://"+n.proxyHealthz+"/healthz")
	})
}

// containerdSockets are the sockets of the run's running containerds: the
// first node's, and the second's once it runs.
func (c *Cluster) containerdSockets() []string {
	out := []string{c.paths.containerdSocket()}
	for _, p := range c.st.Processes {
		if p.Name == secondContainerd && p.alive() {
			out = append(out, secondNode(c.paths).dir.containerdSocket())
		}
	}
	return out
}

// removeOwnNetNS deletes the network namespaces the run made itself.
func removeOwnNetNS(s *state) []error {
	var errs []error
	for _, ns := range s.OwnNetNS {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
			continue
		}
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// ownNetNSLeft lists the run's own namespaces still on the host.
func ownNetNSLeft(s *state) []string {
	var out []string
	for _, ns := range s.OwnNetNS {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err == nil {
			out = append(out, "network namespace "+ns)
		}
	}
	return out
}
