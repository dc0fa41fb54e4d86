package elbv2_test

import (
	"fmt"
	"time"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// A gate watches a target group for as long as a pod waits on it, and reads
// the latest listing whenever it changes.
func Example() {
	// The emulator stands in for AWS; in production the client is built
	// from the usual AWS config.
	sim := elbv2sim.New(elbv2sim.Config{})
	defer sim.Close()
	sim.Listen("127.0.0.1:0")
	arn, _ := sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "web", Port: 8080, HealthCheckInterval: time.Minute})
	_ = sim.RegisterTargets(arn, elbv2sim.Target{ID: "127.0.0.1", Port: 8080})
	client := sim.Client() // an *elasticloadbalancingv2.Client

	p := elbv2.New(client, elbv2.Config{}) // 2 calls/s, burst 5, every 2 s
	defer p.Close()
	w := p.Watch(arn)
	defer w.Close()
	for range w.Changed() {
		obs, ok := w.Latest()
		if !ok {
			continue // a failed call: obs.Err says why
		}
		for t, h := range obs.Targets {
			fmt.Println(t.ID, t.Port, h.State, h.Reason)
		}
		break
	}
	// Output: 127.0.0.1 8080 initial Elb.RegistrationInProgress
}
