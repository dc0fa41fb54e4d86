package drain

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Decision is one step of the gate for one terminating pod, as the
// tracker hands it, once, to each Consumer.
type Decision struct {
	// Key is the pod's; Pod the pod as its routes were observed (with the
	// addresses last seen, when it lost them: see Tracker). The pod may be
	// shared with the cache: read it, never change it.
	Key route.PodKey
	Pod *corev1.Pod
	// At is the step's time.
	At time.Time
	// Verdict is what the gate answered.
	Verdict api.Verdict
	// Prev is the memory the step started from (the replica's own, merged
	// with the shared record), Next the memory it returned.
	Prev, Next gate.Memory
	// Observations are what the route sources reported.
	Observations []gate.Observation
	// Asked says the decision answers the pod's agent (the wait API);
	// the others follow a route change or the clock (a tail's end).
	Asked bool
	// EverAsked says the pod's agent asked this replica at least once.
	EverAsked bool
	// Shared says the pod's memory is shared with the other replicas: it
	// carries the agent (api.AnnotationInjected), or its agent asked.
	Shared bool
}

// Consumer is what follows from a decision: the shared memory, what the
// drains teach (internal/learn), the pod's Events (internal/events).
// The tracker calls it under its lock, in the order the consumers were
// given: it must be quick (write in the background) and must never call
// back into the tracker.
type Consumer interface {
	// Decided is told each decision, once.
	Decided(d *Decision)
	// Gone is told that the tracker forgot the pod: it is gone, or
	// another incarnation of the same name replaced it.
	Gone(pod route.PodKey)
}

// Keeper is a Consumer that may go on observing a pod's routes of a kind
// after the tracker is done with it (learn watches a gone pod until its
// routes went out). The tracker then leaves the source's work for the pod
// (route.Forgetter) to it: the keeper forgets or drops it itself.
type Keeper interface {
	Consumer
	Keeps(pod route.PodKey, kind string) bool
}

// Store is the replicas' shared memory of each waiting pod: a Lease per
// pod (internal/ledger) holding the drain's Record. Failing reads or
// writes never shorten a wait: a replica then decides from its own memory.
type Store interface {
	// Record is what the replicas know of the pod, with what this replica
	// has yet to write.
	Record(uid types.UID) Record
	// Note adds r to the pod's record (written in the background).
	Note(uid types.UID, r Record)
	// Drop deletes the pod's record: the pod is gone.
	Drop(uid types.UID)
	// Pods lists the pod ("namespace/name") of every record by its UID.
	Pods() map[types.UID]string
}

// sharedMemory is the Consumer that writes what each step added to a
// shared pod's record, and deletes the record when the pod is gone.
type sharedMemory struct{ store Store }

func (m sharedMemory) Decided(d *Decision) {
	if !d.Shared {
		return
	}
	tails := map[gate.RouteKey]time.Duration{}
	for _, o := range d.Observations {
		tails[gate.RouteKey{Kind: o.Kind, Name: o.Name}] = max(o.Tail, 0)
	}
	m.store.Note(types.UID(d.Key.UID), recordOf(d.Key.String(), d.Prev, d.Next, d.At, tails))
}

func (m sharedMemory) Gone(pod route.PodKey) { m.store.Drop(types.UID(pod.UID)) }
