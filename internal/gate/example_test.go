package gate_test

import (
	"fmt"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
)

// A pod behind a Service and an ALB: the EndpointSlice took it out at once,
// the load balancer controller deregistered it 4 s later. Step is called
// again as things change and time passes, with the memory it returned; the
// pod is released when the ALB tail has passed.
func ExampleStep() {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := gate.Pod{Namespace: "shop", Name: "web-0", UID: "uid-1", Terminating: true, Deadline: t0.Add(5 * time.Minute)}
	slice := gate.Observation{Kind: "endpointslice", Name: "shop/web", Synced: true,
		State: "terminating", Out: true, What: "the slice lists the pod's endpoint as terminating",
		Tail: 5 * time.Second, TailName: "EndpointSlice"}
	target := gate.Observation{Kind: "targetgroup", Name: "tg-web", Synced: true,
		State: "healthy", What: "the target is healthy", Tail: 20 * time.Second, TailName: "ALB"}

	var mem gate.Memory
	step := func(after time.Duration) {
		var v api.Verdict
		v, mem = gate.Step(t0.Add(after), pod, mem, []gate.Observation{slice, target})
		fmt.Printf("after %v: released=%v reason=%q\n  %s\n", after, v.Released, v.Reason, v.Message)
	}
	step(0)
	target.State, target.Out, target.What = "draining", true, "the target is draining"
	step(4 * time.Second)
	step(10 * time.Second)
	step(24 * time.Second)
	// Output:
	// after 0s: released=false reason=""
	//   waiting for 2 routes of 2: endpointslice/shop/web terminating, targetgroup/tg-web healthy
	// after 4s: released=false reason=""
	//   waiting for 2 routes of 2: endpointslice/shop/web terminating, targetgroup/tg-web draining
	// after 10s: released=false reason=""
	//   waiting for 1 route of 2: targetgroup/tg-web draining
	// after 24s: released=true reason="drained"
	//   released: all 2 routes closed (endpointslice/shop/web by its EndpointSlice tail (5s); targetgroup/tg-web by its ALB tail (20s))
}
