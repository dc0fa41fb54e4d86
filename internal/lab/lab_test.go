package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRolloutFailsWithoutHookAndNotWithLongSleep is the lab end to end on the
// real cluster, shortened by a time scale: a rollout under load fails
// requests with no preStop hook, and fails none with a sleep longer than the
// controller's lag plus the data plane's propagation.
func TestRolloutFailsWithoutHookAndNotWithLongSleep(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.LoadGoImage(ctx, DemoImage, "./cmd/draingate-demoapp"); err != nil {
		t.Fatal(err)
	}
	const scale = 0.25
	sc := Scenarios["alb"].Scaled(scale)
	long := Strategy{Name: "sleep:long", Sleep: sc.MaxRouteDelay() + 3*time.Second}
	rep, err := Run(ctx, Env{Config: c.Config, Client: c.Client}, Options{
		Scenario: sc, TimeScale: scale, Replicas: 3, Rollouts: 1, RPS: 40, Seed: 7,
		Strategies: []Strategy{{Name: "none"}, long}, Progress: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteTable(os.Stderr)
	for _, n := range rep.Notes {
		if strings.Contains(n, "MISMATCH") {
			t.Error(n)
		}
	}
	none, slept := rep.Strategies[0], rep.Strategies[1]
	for _, s := range rep.Strategies {
		sent, failed := 0, 0
		for _, b := range s.Timeline.Buckets() {
			sent, failed = sent+b.Sent, failed+b.Failed
		}
		if sent != s.Requests || failed != s.Failed {
			t.Errorf("%s: report says %d requests, %d failed; the timeline holds %d and %d", s.Name, s.Requests, s.Failed, sent, failed)
		}
	}
	if none.Requests == 0 || slept.Requests == 0 {
		t.Fatalf("no load: %d and %d requests", none.Requests, slept.Requests)
	}
	if none.Failed == 0 {
		t.Errorf("none: 0 of %d requests failed; the race did not show", none.Requests)
	}
	if slept.Failed != 0 {
		t.Errorf("%s: %d of %d requests failed; a sleep beyond lag+propagation must lose none", long.Name, slept.Failed, slept.Requests)
	}
	if len(none.Terminations) != 3 || len(slept.Terminations) != 3 {
		t.Errorf("terminations measured: %d and %d, want 3 each", len(none.Terminations), len(slept.Terminations))
	}
	for _, s := range slept.Slacks {
		if s < 0 {
			t.Errorf("%s: a pod got SIGTERM %s before the data plane stopped sending to it", long.Name, -s)
		}
	}
	if slept.ELBv2Calls["DeregisterTargets"] == 0 || slept.ELBv2Calls["RegisterTargets"] == 0 {
		t.Errorf("ELBv2 calls %v: want registrations and deregistrations", slept.ELBv2Calls)
	}
}
