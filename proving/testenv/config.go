package testenv

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// The cluster's fixed addresses. Everything listens on loopback or on the
// bridge the run creates; nothing is reachable from outside the host.
const (
	// NodeName is the one node's name.
	NodeName = "draingate-node"
	// BridgeName is the CNI bridge the run creates.
	BridgeName = "draingate0"
	// HostIP is the bridge's address on the host: the API server, the
	// kubelet and anything on the host that pods must reach listen here.
	HostIP = "10.244.0.1"
	// PodSubnet is the node's pod range.
	PodSubnet = "10.244.0.0/24"
	// ClusterCIDR is the cluster's pod range (kube-proxy's local traffic).
	ClusterCIDR = "10.244.0.0/16"
	// ServiceCIDR is the Service ClusterIP range.
	ServiceCIDR = "10.96.0.0/16"
	// DNSIP is the cluster DNS Service's ClusterIP.
	DNSIP = "10.96.0.10"
	// KubernetesServiceIP is the ClusterIP of the default/kubernetes Service.
	KubernetesServiceIP = "10.96.0.1"

	// firstLBNodeIP and lbNodeIPCount make LBNodeIPs.
	firstLBNodeIP = "10.245.0.11"
	lbNodeIPCount = 8
	// firstLBClientIP and lbClientIPCount make LBClientIPs.
	firstLBClientIP = "10.245.1.1"
	lbClientIPCount = 64

	apiserverPort  = 6443
	etcdClientPort = 23790
	etcdPeerPort   = 23800
)

// LBNodeIPs returns the source addresses of the lab's load balancer nodes:
// 10.245.0.11 to 10.245.0.18, one per node.
//
// The lab plays a load balancer of several nodes on the host (see
// proving/sim/dataplane's Balancer and Config.SourceIP), and each node
// connects to the pods from its own address, so that the app, which counts
// requests by source address, tells which node sent what. These addresses
// are therefore neither the node's (HostIP, which the kubelet's probes and
// everything else on the host use) nor a pod's (ClusterCIDR), nor in
// ServiceCIDR. The run puts each on the bridge as a /32 (setupNetwork): the
// host owns them, and a pod's reply to one goes out through its default
// route, the bridge's HostIP, and is delivered on the host; no route
// changes. They go after HostIP on the bridge, which matters: the CNI bridge
// plugin (isGateway) refuses a bridge whose first IPv4 address is not the
// gateway, and the kernel lists a device's addresses in the order they were
// added. Deleting the bridge on teardown removes them.
func LBNodeIPs() []string { return addrRange(firstLBNodeIP, lbNodeIPCount) }

// LBClientIPs returns the addresses the lab's clients connect from when a
// load balancer keeps its clients' addresses (an NLB with client IP
// preservation): 10.245.1.1 to 10.245.1.64, one per client. They stand for
// the internet's addresses, and like LBNodeIPs are the host's own, on the
// bridge after HostIP, apart from every cluster range.
func LBClientIPs() []string { return addrRange(firstLBClientIP, lbClientIPCount) }

// bridgeExtraIPs are the addresses the run puts on the bridge after HostIP.
func bridgeExtraIPs() []string { return append(LBNodeIPs(), LBClientIPs()...) }

func addrRange(first string, n int) []string {
	out := make([]string, n)
	a := netip.MustParseAddr(first)
	for i := range out {
		out[i] = a.String()
		a = a.Next()
	}
	return out
}

// listeners are the host ports a run binds: checked free before start.
var listeners = []struct{ part, addr string }{
	{"etcd", fmt.Sprintf("127.0.0.1:%d", etcdClientPort)},
	{"etcd peer", fmt.Sprintf("127.0.0.1:%d", etcdPeerPort)},
	{"kube-apiserver", fmt.Sprintf("%s:%d", HostIP, apiserverPort)},
	{"kube-controller-manager", "127.0.0.1:10257"},
	{"kube-scheduler", "127.0.0.1:10259"},
	{"kubelet", HostIP + ":10250"},
	{"kubelet healthz", "127.0.0.1:10248"},
	{"kube-proxy healthz", "127.0.0.1:10256"},
	{"kube-proxy metrics", "127.0.0.1:10249"},
}

// paths names the files of one run, all under its run folder.
type paths struct{ dir string }

func (p paths) join(elem ...string) string { return filepath.Join(append([]string{p.dir}, elem...)...) }
func (p paths) pki() string                { return p.join("pki") }
func (p paths) logs() string               { return p.join("logs") }
func (p paths) log(part string) string     { return p.join("logs", part+".log") }
func (p paths) kubeconfig() string         { return p.join("kubeconfig") }
func (p paths) componentKubeconfig(c string) string {
	return p.join("kubeconfigs", c+".kubeconfig")
}
func (p paths) containerd() string       { return p.join("containerd") }
func (p paths) containerdSocket() string { return p.join("containerd", "containerd.sock") }
func (p paths) registries() string       { return p.join("containerd", "certs.d") }
func (p paths) kubelet() string          { return p.join("kubelet") }
func (p paths) cniConf() string          { return p.join("cni", "net.d") }
func (p paths) images() string           { return p.join("images") }

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

func kubeconfig(server, ca, cert, key string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: draingate
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: draingate
  context:
    cluster: draingate
    user: user
current-context: draingate
`, server, ca, cert, key)
}

func apiserverURL() string { return fmt.Sprintf("https://%s:%d", HostIP, apiserverPort) }

func containerdConfig(p paths, pauseImage string) string {
	c := p.containerd()
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This VM lacks CAP_SYS_RESOURCE: without this runc fails with
  # "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  # Registries the tests serve (Cluster.TrustRegistry), one folder each.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, filepath.Join(c, "root"), filepath.Join(c, "state"), p.containerdSocket(), filepath.Join(c, "opt"),
		pauseImage, filepath.Join(c, "runc"), p.cniConf(), p.registries())
}

// node is what differs between the cluster's nodes: the first runs on the
// host's network, a second (AddNode) in a network namespace of its own.
type node struct {
	name, ip string
	// bridge is the CNI bridge, gateway its address, podSubnet its pods'.
	bridge, gateway, podSubnet string
	// dir holds the node's containerd, CNI and kubelet state.
	dir paths
	// proxyHealthz is kube-proxy's health address; cgroupRoot the
	// kubelet's ("/" on the first node).
	proxyHealthz, cgroupRoot string
	// taint, when set, is a NoSchedule taint key the node registers with.
	taint string
}

// firstNode is the node on the host's network.
func firstNode(p paths) node {
	return node{name: NodeName, ip: HostIP, bridge: BridgeName, gateway: HostIP, podSubnet: PodSubnet, dir: p, proxyHealthz: "127.0.0.1:10256", cgroupRoot: "/"}
}

// cniConfig is a bridge network on the node's bridge. No masquerade: pods
// talk only to each other and to the host, so the plugin adds no iptables
// rules.
func cniConfig(n node) string {
	p := n.dir
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "draingate",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, n.bridge, p.join("cni", "ipam"), n.podSubnet, n.gateway)
}

// kubeletConfig is node n's kubelet's; c holds the cluster's shared files
// (CA, resolv.conf).
func kubeletConfig(c paths, n node) string {
	taints := ""
	if n.taint != "" {
		taints = fmt.Sprintf("registerWithTaints:\n- {key: %q, effect: NoSchedule}\n", n.taint)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM is cgroup v1 without systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
resolvConf: %s
clusterDNS: [%s]
clusterDomain: cluster.local
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
# Images are imported offline and cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
cgroupRoot: %s
%s`, n.ip, n.dir.containerdSocket(), n.dir.join("pod-logs"), c.join("resolv.conf"), DNSIP, filepath.Join(c.pki(), "ca.crt"), n.cgroupRoot, taints)
}

func kubeProxyConfig(c paths, n node) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: %s
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %s
mode: iptables
iptables:
  # Keeps net.ipv4.conf.all.route_localnet untouched.
  localhostNodePorts: false
  minSyncPeriod: 0s
  syncPeriod: 30s
conntrack:
  # Zero leaves the host's conntrack sysctls as they are.
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, c.componentKubeconfig("kube-proxy"), n.name, n.ip, n.proxyHealthz, ClusterCIDR)
}

func serviceIPs() []net.IP {
	return []net.IP{net.ParseIP(HostIP), net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)}
}

func apiserverNames() []string {
	return []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
}

// cleanEnv is the environment for the cluster's processes: the caller's,
// without variables that etcd or the Kubernetes components read as config.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ETCD_") || k == "KUBECONFIG" || strings.HasPrefix(k, "CONTAINERD_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// writeNodeConfig writes node n's containerd, CNI, kubelet and kube-proxy
// configuration into its folder; c holds the cluster's shared files.
func writeNodeConfig(c paths, n node) error {
	files := map[string]string{
		n.dir.join("containerd", "config.toml"):                 containerdConfig(n.dir, PauseImage),
		filepath.Join(n.dir.cniConf(), "10-draingate.conflist"): cniConfig(n),
		n.dir.join("kubelet-config.yaml"):                       kubeletConfig(c, n),
		n.dir.join("kube-proxy-config.yaml"):                    kubeProxyConfig(c, n),
	}
	for path, content := range files {
		if err := writeFile(path, content); err != nil {
			return err
		}
	}
	return nil
}
