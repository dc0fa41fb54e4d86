package gate_test

import (
	"fmt"
	"time"

	"draingate.dev/draingate/internal/gate"
)

// A pod behind a Service and an ALB: the EndpointSlice took it out at once,
// the load balancer controller deregistered it 4 s later. Decide is asked
// again as time passes; the pod is released when the ALB tail has passed.
func ExampleDecide() {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := gate.Pod{Namespace: "shop", Name: "web-0", UID: "uid-1",
		Terminating: true, TerminatingSince: t0, Deadline: t0.Add(5 * time.Minute)}
	routes := []gate.RouteObservation{
		{Kind: gate.KindEndpointSlice, Name: "shop/web-x7k2p", Synced: true,
			Present: true, Serving: true, Terminating: true, OutSince: t0.Add(300 * time.Millisecond)},
		{Kind: gate.KindTargetGroup, Name: "tg-web", Synced: true, LoadBalancer: gate.LoadBalancerApplication,
			State: gate.TargetDraining, Reason: "Target.DeregistrationInProgress", WasRegistered: true,
			OutSince: t0.Add(4 * time.Second)},
	}
	for _, after := range []time.Duration{10 * time.Second, 24 * time.Second} {
		v := gate.Decide(t0.Add(after), pod, routes, gate.DefaultTails())
		fmt.Printf("after %v: released=%v reason=%q\n", after, v.Released, v.Reason)
		for _, r := range v.Routes {
			fmt.Printf("  %s, tail ends %s\n", r, r.TailEnds.Format(time.TimeOnly))
		}
		fmt.Println(" ", v.Message)
	}
	// Output:
	// after 10s: released=false reason=""
	//   endpointslice/shop/web-x7k2p closed, tail ends 03:04:10
	//   targetgroup/tg-web draining, tail ends 03:04:29
	//   waiting for 1 route of 2: targetgroup/tg-web draining
	// after 24s: released=true reason="drained"
	//   endpointslice/shop/web-x7k2p closed, tail ends 03:04:10
	//   targetgroup/tg-web closed, tail ends 03:04:29
	//   released: all 2 routes closed
}
