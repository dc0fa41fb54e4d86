package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// The faults the lab can inject during each rollout (Chaos.Kind).
const (
	// ChaosKillOne deletes one gate server pod with no grace, as a node
	// failure or an OOM kill would; its Deployment replaces it.
	ChaosKillOne = "kill-one"
	// ChaosKillAll takes every gate server replica away for Chaos.For: the
	// Deployment scaled to zero and its pods deleted with no grace, then
	// scaled back.
	ChaosKillAll = "kill-all"
	// ChaosAPIServer stops the cluster's API server, keeps it down for
	// Chaos.For and starts it again.
	ChaosAPIServer = "apiserver-restart"
	// ChaosThrottle shrinks the emulator's Describe bucket (the account's,
	// shared with the load balancer controller) to Chaos.Capacity and
	// Chaos.Refill for Chaos.For: an AWS throttling storm.
	ChaosThrottle = "throttle"
)

// ChaosKinds are the faults, in the order the help lists them.
var ChaosKinds = []string{ChaosKillOne, ChaosKillAll, ChaosAPIServer, ChaosThrottle}

// Chaos is one fault injected during every rollout, At after the rollout
// starts. Durations are at full scale: the run scales them like every
// other (Scaled).
type Chaos struct {
	Kind string
	At   time.Duration
	// For is how long kill-all keeps the gate down, apiserver-restart the
	// API server, and throttle the storm.
	For time.Duration
	// Capacity and Refill (per second) size the Describe bucket during a
	// throttle storm (AWS's own: 40 and 10).
	Capacity, Refill float64
}

// Validate says what is wrong with c, if anything.
func (c Chaos) Validate() error {
	if c.Kind == "" {
		return nil
	}
	known := false
	for _, k := range ChaosKinds {
		known = known || k == c.Kind
	}
	var errs []error
	if !known {
		errs = append(errs, fmt.Errorf("--chaos %q: want one of %s", c.Kind, strings.Join(ChaosKinds, ", ")))
	}
	if c.At < 0 {
		errs = append(errs, errors.New("--chaos-at must not be negative"))
	}
	if c.Kind != ChaosKillOne && c.For <= 0 {
		errs = append(errs, fmt.Errorf("--chaos-for must be positive for %s", c.Kind))
	}
	if c.Kind == ChaosThrottle && (c.Capacity < 1 || c.Refill <= 0) {
		errs = append(errs, errors.New("--storm-capacity must be at least 1 and --storm-refill positive"))
	}
	return errors.Join(errs...)
}

// Scaled multiplies its durations by f.
func (c Chaos) Scaled(f float64) Chaos {
	if f > 0 {
		c.At = time.Duration(float64(c.At) * f)
		c.For = time.Duration(float64(c.For) * f)
	}
	return c
}

// String describes the fault for the report.
func (c Chaos) String() string {
	switch c.Kind {
	case ChaosKillOne:
		return fmt.Sprintf("one gate server replica killed %s into each rollout", c.At)
	case ChaosKillAll:
		return fmt.Sprintf("every gate server replica gone for %s, from %s into each rollout", c.For, c.At)
	case ChaosAPIServer:
		return fmt.Sprintf("the API server stopped %s into each rollout and started again %s later", c.At, c.For)
	case ChaosThrottle:
		return fmt.Sprintf("a Describe throttling storm (bucket %g, refill %g/s) for %s, from %s into each rollout", c.Capacity, c.Refill, c.For, c.At)
	}
	return "none"
}

// chaos injects Options.Chaos into one rollout: it waits Chaos.At, does the
// fault, undoes it after Chaos.For, and reports each step to note. It
// returns once the fault is over (or ctx ends).
func (r *runner) chaos(ctx context.Context, st Strategy, gate *gateSetup, note func(string)) error {
	c := r.o.Chaos
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.At):
	}
	start := time.Now()
	since := func() string { return fmt.Sprintf("%.1fs", time.Since(r.start).Seconds()) }
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	switch c.Kind {
	case ChaosKillOne, ChaosKillAll:
		if gate == nil {
			note("no gate server to kill in this strategy")
			return nil
		}
		return r.killGate(ctx, gate, c, note, wait, since)
	case ChaosAPIServer:
		if r.env.RestartAPIServer == nil {
			return errors.New("--chaos apiserver-restart needs a cluster this process started (not one it attached to)")
		}
		note(fmt.Sprintf("at %s: API server stopping (SIGTERM)", since()))
		stopping, err := r.env.RestartAPIServer(ctx, c.For)
		if err != nil {
			return fmt.Errorf("restarting the API server: %w", err)
		}
		note(fmt.Sprintf("at %s: API server ready again, %.1fs after the SIGTERM (its stop took %.1fs, then down %s, then its start)",
			since(), time.Since(start).Seconds(), stopping.Seconds(), c.For))
	case ChaosThrottle:
		storm := elbv2sim.BucketConfig{Capacity: c.Capacity, RefillPerSecond: c.Refill}
		r.emu.SetThrottle(storm, r.registration, elbv2sim.BucketConfig{})
		note(fmt.Sprintf("at %s: Describe bucket shrunk to %g, refill %g/s", since(), c.Capacity, c.Refill))
		err := wait(c.For)
		r.emu.SetThrottle(elbv2sim.BucketConfig{}, r.registration, elbv2sim.BucketConfig{})
		note(fmt.Sprintf("at %s: Describe bucket back to AWS's (40, 10/s)", since()))
		return err
	}
	return nil
}

func (r *runner) killGate(ctx context.Context, gate *gateSetup, c Chaos, note func(string), wait func(time.Duration) error, since func() string) error {
	cl := r.env.Client
	dep, err := cl.AppsV1().Deployments(gate.Namespace).Get(ctx, gate.Namespace, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the gate server's Deployment: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return err
	}
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	if c.Kind == ChaosKillAll {
		if _, err := cl.AppsV1().Deployments(gate.Namespace).Patch(ctx, dep.Name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	pods, err := cl.CoreV1().Pods(gate.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return err
	}
	var killed []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if err := cl.CoreV1().Pods(gate.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return err
		}
		killed = append(killed, p.Name)
		if c.Kind == ChaosKillOne {
			break
		}
	}
	note(fmt.Sprintf("at %s: gate server pod(s) %s deleted with no grace (of %d replicas)", since(), strings.Join(killed, ", "), replicas))
	if c.Kind == ChaosKillOne {
		return nil
	}
	werr := wait(c.For)
	// Back even when ctx ended: the strategy's cleanup uninstalls it anyway.
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := cl.AppsV1().Deployments(gate.Namespace).Patch(context.WithoutCancel(ctx), dep.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return errors.Join(werr, err)
	}
	note(fmt.Sprintf("at %s: gate server scaled back to %d replicas", since(), replicas))
	return werr
}
