// Package route is what a kind of route implements: the ways traffic can
// still reach a terminating pod. Each kind is a folder below this one
// (endpointslice, targetgroup, external) and owns everything about itself:
// its flags and tail defaults, the objects it caches and how it slims
// them, its informers and background work, its metrics, what it adds to a
// new pod's max-wait at admission, and one gate.Observation per route of a
// terminating pod. The gate (internal/gate) judges the observations and
// knows no kind; the drain tracker (internal/drain) observes through every
// kind; the server lists the kinds in one file and otherwise only loops
// over them. What every kind reads of Services and their EndpointSlices is
// here (Services), not in a kind.
//
// Adding a kind (a GKE NEG, say):
//
//  1. Make a folder internal/route/<kind> with a type implementing Kind
//     (its flags, their validation, its tails, Open) and one implementing
//     Source (Kind, Start, Ready, Observe, AdmissionWait), plus the small
//     interfaces of what only some kinds do: Transformer (it caches
//     objects of its own), Forgetter (it works per waiting pod), Closer
//     (its work outlives the server's context), Learner (its routes teach
//     their load balancer's timings), LoadBalancers (it reads the load
//     balancers in front of Services). Source.Kind names the routes in
//     verdicts.
//  2. Add one line to the list in internal/server/kinds.go.
//  3. What it needs to know of Services (which list a pod, which select a
//     pod being created) it reads from Host.Services; of the load
//     balancers in front of them, from Host.LoadBalancers. A kind package
//     imports no other kind package.
//  4. Write down the facts its tail rests on, with their sources, in
//     docs/facts.md.
//
// Rules every kind keeps: an error or a source that has not synced never
// makes a route look closed (Observe fails, or reports the route not
// synced); a route stays a route after its owner drops the pod (Observe
// reports every name in known); missing data may lengthen a wait, never
// shorten one.
package route

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/gate"
)

// Kind is one kind of route as the server configures it, before it runs:
// its flags, then the Source it opens. The server calls Flags, parses the
// command line, calls Validate, then Open once.
type Kind interface {
	// Name names the kind, as its Source's routes carry it.
	Name() string
	// Flags registers the kind's flags on fs, with their defaults. Each
	// also reads DRAINGATE_<FLAG> (internal/cli).
	Flags(fs *flag.FlagSet)
	// Validate checks the flags' values; each error names its flag.
	Validate() error
	// Tails are the kind's propagation tails as configured, for the
	// server's start-up line and its check that not every tail is zero.
	Tails() []Tail
	// Open makes the kind's Source, or returns nil when the flags turn
	// the kind off. It makes no call to the cluster or a cloud: Start does.
	Open(ctx context.Context, env Env) (Source, error)
}

// Describer is a Kind whose Source registers metrics on Env.Registry: it
// describes them without opening anything, so that the server can name
// every metric it may export (server.MetricNames).
type Describer interface {
	Describe(ch chan<- *prometheus.Desc)
}

// Tail is one configured propagation tail: how long a route's consumers
// may still send after its owner took the pod out.
type Tail struct {
	// Name is short ("alb"); Flag is the flag that sets it.
	Name, Flag string
	Value      time.Duration
}

// Env is what the server hands a kind when opening it.
type Env struct {
	// Kube reads the cluster live (discovery, reads a cache would not
	// hold); a kind caches what it watches through Host.Cache.
	Kube kubernetes.Interface
	// Registry takes the kind's own metrics.
	Registry prometheus.Registerer
	// Log receives what an operator should know.
	Log *slog.Logger
	// WeighTraffic is false when the server weighs no traffic evidence
	// (--traffic-evidence=false): a kind then reads nothing that only
	// evidence needs (a load balancer's senders).
	WeighTraffic bool
	// EarlyClose lets the traffic evidence close a route before its tail
	// (--traffic-early-close, an opt-in): a kind then reads what only the
	// early close needs (a load balancer's senders), and says so in its
	// observations (gate.Observation.EarlyClose).
	EarlyClose bool
	// Learned, when set, is what this cluster's drains taught, by
	// Learner.LearnKey: a Learner takes its routes' tails from it.
	Learned LearnedTails
}

// ErrGone is what an observation's error is (errors.Is) when the route's
// owner itself is gone (a target group deleted in AWS): nothing more is to
// be learnt of the route. Gone marks an error so, its message unchanged.
var ErrGone = errors.New("the route's owner is gone")

// Gone marks err as ErrGone; nil stays nil.
func Gone(err error) error {
	if err == nil {
		return nil
	}
	return goneError{err}
}

type goneError struct{ error }

func (g goneError) Unwrap() []error { return []error{g.error, ErrGone} }

// Host is what the server offers a source when starting it.
type Host struct {
	// Cache is the server's shared informer cache; the source registers
	// its informers and indexes on it. Its objects went through the
	// source's Transform.
	Cache cache.Cache
	// Changed is told whenever the routes of pods may have changed:
	// namespace "" means every pod, name "" every pod of the namespace. It
	// must not be called with any lock held that Observe takes.
	Changed func(namespace, name string)
	// Services are what every kind reads of Services and their
	// EndpointSlices, started before the kinds.
	Services *Services
	// LoadBalancers, when a kind reads the load balancers in front of
	// Services, is that kind; nil otherwise.
	LoadBalancers LoadBalancers
}

// Source observes the routes of one kind for terminating pods: what every
// kind does. The server calls Start once; the drain tracker calls Ready and
// Observe, under its own lock; the injection webhook calls AdmissionWait.
// What only some kinds do is a small interface of its own that a Source
// may implement: Transformer, Forgetter, Closer, Learner.
type Source interface {
	// Kind names the source's routes (api.Route.Kind).
	Kind() string
	// Start registers the source's informers and indexes on h.Cache and
	// starts its background work, until ctx ends.
	Start(ctx context.Context, h Host) error
	// Ready says why the source cannot observe yet (nil once it can).
	Ready() error
	// Observe returns one observation for every route of the pod, at least
	// one for each route in known (the routes this source reported for
	// this pod before, in this server or another replica: a route stays a
	// route after its owner drops the pod, and WasRoute says the pod was
	// seen in it). waiting says the pod's agent is asking: a source may do
	// costly work (AWS polls) only then. An error means no observation at
	// all: the gate answers no verdict rather than one that forgets a
	// route.
	Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, waiting bool) ([]gate.Observation, error)
	// AdmissionWait is how much longer than the configured max-wait a pod
	// being created may need on this kind's routes (zero: no longer), and
	// why, naming the route, for the log. The webhook sizes the pod's
	// max-wait and grace period with the longest of every kind's. It reads
	// only what the source caches. An error says the kind could not size
	// the pod (its cache not synced, a Service not seen yet): extra is
	// then its longest tail's, which the webhook applies and says so; a
	// lookup never fails an admission, nor shortens its pod's wait.
	AdmissionWait(ctx context.Context, pod *corev1.Pod) (extra time.Duration, why string, err error)
}

// Transformer is a Source that caches objects of its own types: the cache
// calls Transform for every object it stores, to slim it; ok is false for
// an object of any other type.
type Transformer interface {
	Transform(obj any) (out any, ok bool)
}

// Forgetter is a Source that works for each waiting pod (polls its target
// groups) or remembers something per pod.
type Forgetter interface {
	// Forget tells the source that nobody waits for the pod any more (its
	// agent stopped asking): it may stop costly work done for it, and must
	// keep what it knows of the pod's routes. A later Observe with waiting
	// starts the work again.
	Forget(pod PodKey)
	// Drop tells the source that the pod is gone: it may forget everything
	// about it.
	Drop(pod PodKey)
}

// Closer is a Source with work that outlives Start's context (a poller's
// clients): the server calls Close once, at shutdown, or when it does not
// start.
type Closer interface {
	Close()
}

// Learner is a Source whose routes teach what the drains measure
// (internal/learn): how late a load balancer's nodes still send after a
// target went out, and how long after a pod's deletion its owner takes it
// out. It gives learning the keys of its routes, and the routes a pod
// being created will have.
type Learner interface {
	// LearnKey names what a route teaches: its load balancer ("" when it
	// teaches nothing). Routes behind one load balancer share a key.
	LearnKey(routeName string) string
	// AdmissionRoutes are the routes of the kind a pod being created will
	// have, from the source's cache, each with its tail; nil when the
	// cache cannot tell (AdmissionWait says why).
	AdmissionRoutes(ctx context.Context, pod *corev1.Pod) []Planned
}

// Planned is a route a pod being created will have.
type Planned struct {
	// Name is the route's; What names it in a sentence ("target group
	// <ARN> (Service web)").
	Name, What string
	// Tail is its tail (lengthened by what was learnt), TailName names
	// it ("ALB").
	Tail     time.Duration
	TailName string
}

// LearnedTails is what the drains taught (internal/learn): the tail a route
// whose LearnKey is key takes, given its configured tail; why, when what
// was learnt decided, says so as a phrase for the route's detail.
type LearnedTails interface {
	Tail(key string, pod PodKey, configured time.Duration) (tail time.Duration, why string)
	// LateChance is the chance, as measured, that one of the load
	// balancer's nodes still sends to a pod after tail (0 when nothing
	// sure was measured): what lets the evidence weigh a quiet source
	// against how rarely a node is that late (gate.Observation.LateChance).
	LateChance(key string, pod PodKey, tail time.Duration) float64
}

// LoadBalancers is what a kind that reads the load balancers in front of
// Services (targetgroup: TargetGroupBindings and their groups' settings)
// tells the other kinds. The server finds it among the sources and hands
// it to every kind (Host.LoadBalancers).
type LoadBalancers interface {
	// ClaimsService says whether the kind routes the Service
	// namespace/name itself (its routes are not external); an error when
	// its cache cannot tell yet.
	ClaimsService(ctx context.Context, namespace, name string) (bool, error)
	// NodeDrain is the longest time the load balancers in front of the
	// Service namespace/name may still send through a node whose last
	// ready endpoint of it went under an external traffic policy of Local
	// (their health checks take the node out, then their data plane stops
	// sending), and a phrase naming it for the route's detail. complete
	// is false when one of them is not read yet, or none is known: the
	// caller then keeps its own default as a floor.
	NodeDrain(ctx context.Context, namespace, name string) (d time.Duration, why string, complete bool)
	// InstanceGroups are the instance target groups that send to the node
	// ports of the Service namespace/name. Their load balancers never take
	// a pod out; the keep-alive connections kube-proxy forwarded to it stay
	// with it until the app closes them.
	InstanceGroups(ctx context.Context, namespace, name string) []string
}

// AdmissionWait is how much longer than the configured max-wait a pod
// being created may need on its routes: the longest any source asks for
// (an NLB's tail beyond the ALB one), with why, naming the route. A kind
// that cannot tell answers its longest tail's and an error: the errors
// are returned beside the longest, which the webhook applies, and says so.
func AdmissionWait(ctx context.Context, sources []Source, pod *corev1.Pod) (time.Duration, string, error) {
	var longest time.Duration
	var why string
	var errs []error
	for _, src := range sources {
		extra, w, err := src.AdmissionWait(ctx, pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s routes: %w", src.Kind(), err))
		}
		if extra > longest {
			longest, why = extra, w
		}
	}
	return longest, why, errors.Join(errs...)
}

// Covered is the tail the agent's default max-wait is sized for (an
// ALB's 20 s, after the controller's deregistration lag): a kind whose
// route may need longer asks admission for the rest (AdmissionWait).
const Covered = 20 * time.Second

// AnnotatedTail is the tail a Service's annotation key sets (a Go
// duration), else def. An annotation that is not a duration, or is
// negative, takes def; the phrase why says where the tail came from, for
// a route's detail (empty for the default).
func AnnotatedTail(svc *corev1.Service, key string, def time.Duration) (d time.Duration, why string) {
	if svc == nil {
		return def, ""
	}
	v, ok := svc.Annotations[key]
	if !ok {
		return def, ""
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return def, fmt.Sprintf(" (the Service's %s %q is not a duration such as 30s: the default applies)", key, v)
	}
	return d, " (the Service's " + key + ")"
}

// PodKey names one pod incarnation.
type PodKey struct {
	Namespace, Name, UID string
}

// KeyOf returns the pod's key.
func KeyOf(pod *corev1.Pod) PodKey {
	return PodKey{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
}

// String is "namespace/name".
func (k PodKey) String() string { return k.Namespace + "/" + k.Name }

// IPs returns the pod's addresses.
func IPs(pod *corev1.Pod) []string {
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = append(ips, pod.Status.PodIP)
	}
	return ips
}

// Addrs returns the pod's addresses, parsed (IPv4-mapped ones as IPv4);
// none for a hostNetwork pod, whose addresses are its node's.
func Addrs(pod *corev1.Pod) []netip.Addr {
	if pod.Spec.HostNetwork {
		return nil
	}
	var out []netip.Addr
	for _, ip := range IPs(pod) {
		if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// NodeAddrs are the addresses of the pod's node, whose traffic (probes)
// is never a route's.
func NodeAddrs(pod *corev1.Pod) []netip.Addr {
	var node []netip.Addr
	for _, h := range pod.Status.HostIPs {
		if a, err := netip.ParseAddr(h.IP); err == nil {
			node = append(node, a)
		}
	}
	if a, err := netip.ParseAddr(pod.Status.HostIP); err == nil {
		node = append(node, a)
	}
	return node
}

// Tombstone is the object an informer's delete handler was given: the
// last state it knew when it missed the deletion itself.
func Tombstone(o any) any {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

// NamespaceHandler is an informer handler that tells changed the namespace
// of every object added, updated or deleted.
func NamespaceHandler(changed func(namespace, name string)) toolscache.ResourceEventHandler {
	ns := func(o any) {
		if c, ok := Tombstone(o).(client.Object); ok {
			changed(c.GetNamespace(), "")
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ns,
		UpdateFunc: func(_, o any) { ns(o) },
		DeleteFunc: ns,
	}
}
