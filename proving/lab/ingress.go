package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"draingate.dev/draingate/proving/sim/dataplane"
	"draingate.dev/draingate/proving/testenv"
)

// The in-cluster ingress (Scenario.Ingress) is a real HAProxy, Debian's
// package unpacked by hack/install-haproxy.sh, started once per replica
// (Scenario.LBNodes) on the host's network, as an ingress controller
// DaemonSet with hostNetwork runs: it reaches the pods from the node's
// address and keeps keep-alive connections to them (HAProxy's defaults:
// connection reuse, 3 retries on a failed connect, no redispatch to another
// server). Each replica has its own controller loop that feeds it the app
// Service's ready endpoints the way ingress-nginx feeds its Lua balancer:
// syncs rate limited to one per Scenario.IngressSyncEvery (ingress-nginx's
// --sync-rate-limit, 0.3/s), picked up by the proxy at the next tick of a
// Scenario.IngressPickup timer whose phase each replica draws (its Lua
// workers' 1 s poll). The changes go through HAProxy's runtime API (servers
// set ready or to maintenance), without a reload. Facts in docs/facts.md,
// "In-cluster ingresses".
//
// The lab mirrors each replica in a dataplane.Proxy that never serves: the
// controller applies every change to it right after HAProxy's, and every
// request HAProxy logs is recorded on it, so that the report's rotation,
// slack and per-node figures read the ingress like a load balancer's nodes.

// ingressServerSlots is how many server slots a replica's backend has: one
// per pod IP the run may see, never reused (a slot's idle connections stay
// with the pod it was set to).
func ingressServerSlots(replicas, rollouts int) int {
	return 16 + 2*replicas*(rollouts+1)
}

// ingressLogFormat is the one log line per request the lab reads: the
// server (slot) name, the status, the active time in ms, the termination
// state, the retries and the bytes sent to the client.
const ingressLogFormat = `dg %s %ST %Ta %ts %rc %B`

type ingress struct {
	bal      *dataplane.Balancer
	replicas []*haproxy
	urls     []string

	mu       sync.Mutex
	ready    map[string]bool      // the Service's ready endpoints now
	notReady map[string]time.Time // IP → when the EndpointSlices first said it was not ready
	wake     []chan struct{}

	stop context.CancelFunc
	done sync.WaitGroup
}

// haproxy is one replica: its process, its runtime API and its mirror.
type haproxy struct {
	name   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	mirror *dataplane.Proxy
	slots  int
	// unanswered counts errors HAProxy logged without sending them: the
	// client's connection was closed instead (readLog).
	unanswered atomic.Int64

	mu      sync.Mutex
	slotIP  map[string]string // server name → pod IP
	ipSlot  map[string]string
	applied map[string]bool // pod IPs in the replica's rotation
}

// startIngress starts the replicas and their controller loops on the app
// Service's EndpointSlices in ns; the caller defers close.
func (r *runner) startIngress(idx int, ns string) (*ingress, error) {
	sc := r.o.Scenario
	if r.env.HAProxy == "" {
		return nil, errors.New("the ingress scenario needs HAProxy: run hack/install-haproxy.sh (make deps does), or set DRAINGATE_HAPROXY to an HAProxy 2.4 or newer")
	}
	ing := &ingress{ready: map[string]bool{}, notReady: map[string]time.Time{}}
	var cfgs []dataplane.Config
	for i := range sc.LBNodes {
		cfgs = append(cfgs, dataplane.Config{Name: fmt.Sprintf("ingress-%d", i+1)})
	}
	ing.bal = dataplane.NewBalancer(cfgs)
	if idx == 0 {
		version, _ := exec.Command(r.env.HAProxy, "-v").Output()
		v, _, _ := strings.Cut(string(version), "\n")
		r.notes = append(r.notes, fmt.Sprintf("ingress: %d replicas of %s on the host's network, fed from the EndpointSlices: syncs at least %s apart, picked up at the next %s tick",
			sc.LBNodes, strings.TrimSpace(v), sc.IngressSyncEvery, sc.IngressPickup))
	}
	ictx, cancel := context.WithCancel(context.Background())
	ing.stop = cancel
	slots := ingressServerSlots(r.o.Replicas, r.o.Rollouts)
	rng := rand.New(rand.NewPCG(r.o.Seed, uint64(idx)+7))
	for i, m := range ing.bal.Nodes() {
		h, url, err := startHAProxy(r.env.HAProxy, m, slots)
		if err != nil {
			ing.close()
			ing.bal.Close()
			return nil, fmt.Errorf("ingress replica %d: %w", i+1, err)
		}
		ing.replicas = append(ing.replicas, h)
		ing.urls = append(ing.urls, url)
		wake := make(chan struct{}, 1)
		ing.wake = append(ing.wake, wake)
		phase := time.Duration(rng.Float64() * float64(sc.IngressPickup))
		ing.done.Add(1)
		go func() {
			defer ing.done.Done()
			ing.controller(ictx, h, wake, sc.IngressSyncEvery, sc.IngressPickup, phase)
		}()
	}
	if err := ing.watch(ictx, r.env.Client, ns); err != nil {
		ing.close()
		ing.bal.Close()
		return nil, err
	}
	return ing, nil
}

// ingressLB is the ingress as the run's load balancer: its replicas'
// mirrors are the nodes, their frontends the clients' addresses.
func (r *runner) ingressLB(idx int, ns string) (*loadBalancer, error) {
	ing, err := r.startIngress(idx, ns)
	if err != nil {
		return nil, err
	}
	return &loadBalancer{bal: ing.bal, nodes: ing.bal.Nodes(), urls: ing.urls, ing: ing, drainedA: map[string]time.Time{}, extra: -1}, nil
}

// watch follows the app Service's EndpointSlices and wakes every replica's
// controller on each change, as an ingress controller's informer does.
func (ing *ingress) watch(ctx context.Context, cl kubernetes.Interface, ns string) error {
	f := informers.NewSharedInformerFactoryWithOptions(cl, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + appName }))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	update := func() {
		ready := map[string]bool{}
		for _, o := range inf.GetStore().List() {
			es := o.(*discoveryv1.EndpointSlice)
			for _, ep := range es.Endpoints {
				if len(ep.Addresses) > 0 && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					ready[ep.Addresses[0]] = true
				}
			}
		}
		now := time.Now()
		ing.mu.Lock()
		for ip := range ing.ready {
			if _, seen := ing.notReady[ip]; !ready[ip] && !seen {
				ing.notReady[ip] = now
			}
		}
		ing.ready = ready
		ing.mu.Unlock()
		for _, w := range ing.wake {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return err
	}
	f.Start(ctx.Done())
	ing.done.Add(1)
	go func() { defer ing.done.Done(); <-ctx.Done(); f.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("ingress: the EndpointSlice informer never synced")
	}
	return nil
}

// controller is one replica's loop: on a change, a sync no sooner than
// syncEvery after the last one, applied at the replica's next pickup tick.
func (ing *ingress) controller(ctx context.Context, h *haproxy, wake <-chan struct{}, syncEvery, pickup, phase time.Duration) {
	var last time.Time
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return ctx.Err() == nil
		}
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
		if !sleep(time.Until(last.Add(syncEvery))) {
			return
		}
		last = time.Now()
		ing.mu.Lock()
		want := maps.Clone(ing.ready)
		ing.mu.Unlock()
		if pickup > 0 {
			// The next tick of phase + k × pickup.
			since := time.Duration(time.Now().UnixNano()) - phase
			if !sleep(pickup - since%pickup) {
				return
			}
		}
		if err := h.apply(want); err != nil && ctx.Err() == nil {
			// Nothing the lab can do but try again at the next change;
			// the report shows the route as it stayed.
			fmt.Fprintf(os.Stderr, "lab: ingress %s: %v\n", h.name, err)
		}
	}
}

// apply puts the replica's rotation to want: new pods get a slot and are set
// ready, pods gone are set to maintenance (HAProxy then picks them for no new
// request, and finishes those in flight).
func (h *haproxy) apply(want map[string]bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ip := range want {
		if h.applied[ip] {
			continue
		}
		slot, ok := h.ipSlot[ip]
		if !ok {
			if len(h.slotIP) == h.slots {
				return fmt.Errorf("all %d server slots used", h.slots)
			}
			slot = "pod" + strconv.Itoa(len(h.slotIP)+1)
			h.slotIP[slot], h.ipSlot[ip] = ip, slot
			if err := h.runtime(fmt.Sprintf("set server be/%s addr %s port %d", slot, ip, appPort)); err != nil {
				return err
			}
		}
		if err := h.runtime("set server be/" + slot + " state ready"); err != nil {
			return err
		}
		h.applied[ip] = true
		h.mirror.Apply(dataplane.Event{Target: dataplane.Target{ID: ip, Port: appPort}, To: dataplane.StateHealthy})
	}
	for ip := range h.applied {
		if want[ip] {
			continue
		}
		if err := h.runtime("set server be/" + h.ipSlot[ip] + " state maint"); err != nil {
			return err
		}
		delete(h.applied, ip)
		h.mirror.Apply(dataplane.Event{Target: dataplane.Target{ID: ip, Port: appPort}, To: "draining"})
	}
	return nil
}

// runtime sends one command to the replica's runtime API and fails on an
// answer that is not empty or a known notice.
func (h *haproxy) runtime(cmd string) error {
	out, err := h.query(cmd)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(out); s != "" && !strings.HasPrefix(s, "no need to change") && !strings.Contains(s, "changed from") {
		return fmt.Errorf("%q: %s", cmd, s)
	}
	return nil
}

// query sends one command to the runtime API and returns its answer.
func (h *haproxy) query(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", filepath.Join(h.dir, "admin.sock"), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	out, err := io.ReadAll(c)
	return string(out), err
}

// startHAProxy writes a replica's configuration and starts it, its log read
// into mirror; it returns once the runtime API answers.
func startHAProxy(bin string, mirror *dataplane.Proxy, slots int) (*haproxy, string, error) {
	dir, err := os.MkdirTemp("", "draingate-lab-haproxy-")
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	cfg := fmt.Sprintf(`global
  stats socket %s mode 600 level admin
  log stdout format raw local0 info
  maxconn 4096
defaults
  mode http
  log global
  log-format %q
  timeout connect 2s
  timeout client 120s
  timeout server 120s
  timeout http-keep-alive 60s
frontend fe
  bind 127.0.0.1:%d
  default_backend be
backend be
  balance roundrobin
  server-template pod 1-%d 127.0.0.1:%d disabled
`, filepath.Join(dir, "admin.sock"), ingressLogFormat, port, slots, appPort)
	if err := os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	h := &haproxy{name: mirror.Name(), dir: dir, mirror: mirror, slots: slots, exited: make(chan struct{}),
		slotIP: map[string]string{}, ipSlot: map[string]string{}, applied: map[string]bool{}}
	h.cmd = exec.Command(bin, "-f", filepath.Join(dir, "haproxy.cfg"), "-db")
	// Its own process group (a terminal's Ctrl-C reaches the lab, which
	// stops it), killed if the lab dies first: never left running.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	var stderr strings.Builder
	h.cmd.Stderr = &limitedWriter{w: &stderr, n: 8 << 10}
	if err := h.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { h.readLog(stdout); h.cmd.Wait(); close(h.exited) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if out, err := h.query("show info"); err == nil && strings.Contains(out, "Name: HAProxy") {
			break
		}
		select {
		case <-h.exited:
			os.RemoveAll(dir)
			return nil, "", fmt.Errorf("haproxy exited at start: %s", strings.TrimSpace(stderr.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.close()
			return nil, "", fmt.Errorf("haproxy's runtime API did not answer in 10s: %s", strings.TrimSpace(stderr.String()))
		}
	}
	return h, fmt.Sprintf("http://127.0.0.1:%d/", port), nil
}

// readLog records every request line on the mirror: the server the request
// went to (its pod), when it was picked (the line's time less the request's
// active time), its status, and whether it was cut off.
func (h *haproxy) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 7 || f[0] != "dg" {
			continue
		}
		now := time.Now()
		code, _ := strconv.Atoi(f[2])
		active, _ := strconv.Atoi(f[3])
		if sent, _ := strconv.Atoi(f[6]); sent == 0 && code >= 500 {
			// HAProxy logs its error but closed the client's
			// keep-alive connection without it (a connect to a pod
			// gone timed out): the client's HTTP stack sends a GET
			// again on a new connection, which HAProxy logs apart, so
			// the client counts one request where HAProxy logs two.
			h.unanswered.Add(1)
			continue
		}
		aborted := code > 0 && code < 500 && f[4] != "--"
		cause := ""
		if code >= 500 || aborted {
			cause = "HAProxy termination state " + f[4]
		}
		h.mu.Lock()
		ip, ok := h.slotIP[f[1]]
		h.mu.Unlock()
		var t *dataplane.Target
		if ok {
			t = &dataplane.Target{ID: ip, Port: appPort}
		}
		h.mirror.Record(t, now.Add(-time.Duration(max(active, 0))*time.Millisecond), max(code, 0), aborted, cause)
	}
	io.Copy(io.Discard, r)
}

// close stops the replica (SIGTERM to the PID it started, then SIGKILL) and
// removes its directory.
func (h *haproxy) close() {
	if h.cmd.Process != nil {
		h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(5 * time.Second):
			h.cmd.Process.Kill()
			<-h.exited
		}
	}
	os.RemoveAll(h.dir)
}

func (ing *ingress) close() {
	if ing.stop != nil {
		ing.stop()
	}
	ing.done.Wait()
	for _, h := range ing.replicas {
		h.close()
	}
}

// unanswered is how many requests the replicas closed the client's
// connection on instead of answering (haproxy.unanswered).
func (ing *ingress) unanswered() int64 {
	var n int64
	for _, h := range ing.replicas {
		n += h.unanswered.Load()
	}
	return n
}

// draining is when the EndpointSlices first said ip was not ready.
func (ing *ingress) draining(ip string) time.Time {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	return ing.notReady[ip]
}

// FindHAProxy returns the haproxy the ingress scenario runs:
// $DRAINGATE_HAPROXY, else .haproxy/bin/haproxy in the module's root (where
// hack/install-haproxy.sh links it), else "" (not installed).
func FindHAProxy() string {
	if p := os.Getenv("DRAINGATE_HAPROXY"); p != "" {
		return p
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		return ""
	}
	p := filepath.Join(root, ".haproxy", "bin", "haproxy")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
