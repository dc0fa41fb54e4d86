package dataplane

import (
	"context"
	"fmt"
	"time"
)

// Balancer is a load balancer of several nodes, as a real ALB or NLB is: each
// node is a Proxy that learns every control-plane event at its own time (its
// own Config.Propagation draws) and connects to targets from its own
// Config.SourceIP. Clients spread over the nodes themselves, as they do over
// the addresses a load balancer's DNS name resolves to: serve each node (see
// Nodes) on its own listener.
//
// A target is out of the Balancer's rotation only once every node took it
// out; until then some node still sends it new requests.
type Balancer struct {
	nodes []*Proxy
}

// NewBalancer returns a Balancer with one node per Config, in that order. A
// node without a Name is called "lb-<n>", n counting from 1. It panics when
// nodes is empty.
func NewBalancer(nodes []Config) *Balancer {
	if len(nodes) == 0 {
		panic("dataplane: NewBalancer with no nodes")
	}
	b := &Balancer{}
	for i, cfg := range nodes {
		if cfg.Name == "" {
			cfg.Name = fmt.Sprintf("lb-%d", i+1)
		}
		b.nodes = append(b.nodes, New(cfg))
	}
	return b
}

// Nodes returns the nodes, in NewBalancer's order.
func (b *Balancer) Nodes() []*Proxy {
	return append([]*Proxy(nil), b.nodes...)
}

// Apply hands ev to every node; each one applies it after a delay drawn from
// its own Propagation. A zero ev.At is set to the time of this call first,
// so that all nodes count their delays from the same instant.
func (b *Balancer) Apply(ev Event) {
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	for _, p := range b.nodes {
		p.Apply(ev)
	}
}

// StoppedAt returns when the last node took t out of rotation: from then on
// no node sends t new requests. ok is false while any node has t in
// rotation, and when no node ever had it.
func (b *Balancer) StoppedAt(t Target) (at time.Time, ok bool) {
	for _, p := range b.nodes {
		in, ever, stopped := p.routing(t)
		if in {
			return time.Time{}, false
		}
		if ever && stopped.After(at) {
			at, ok = stopped, true
		}
	}
	return at, ok
}

// InRotation reports whether any node sends t new requests now.
func (b *Balancer) InRotation(t Target) bool {
	for _, p := range b.nodes {
		if p.InRotation(t) {
			return true
		}
	}
	return false
}

// WaitInRotation returns once every node has at least n targets in
// rotation, or with an error when ctx ends or a node is closed.
func (b *Balancer) WaitInRotation(ctx context.Context, n int) error {
	for {
		for _, p := range b.nodes {
			if err := p.WaitInRotation(ctx, n); err != nil {
				return fmt.Errorf("node %s: %w", p.Name(), err)
			}
		}
		// A node that had n may have lost one while another was awaited.
		all := true
		for _, p := range b.nodes {
			all = all && len(p.Rotation()) >= n
		}
		if all {
			return nil
		}
	}
}

// Stats returns the nodes' request counts summed. For each target, First is
// the earliest and Last the latest pick by any node.
func (b *Balancer) Stats() Stats {
	all := make([]Stats, len(b.nodes))
	for i, p := range b.nodes {
		all[i] = p.Stats()
	}
	return mergeStats(all...)
}

func mergeStats(all ...Stats) Stats {
	sum := Stats{ByStatus: map[int]int64{}, Causes: map[string]int64{}, ByTarget: map[Target]TargetStats{}}
	for _, s := range all {
		sum.Total += s.Total
		sum.Failed += s.Failed
		sum.Aborted += s.Aborted
		sum.NoTarget += s.NoTarget
		for code, n := range s.ByStatus {
			sum.ByStatus[code] += n
		}
		for c, n := range s.Causes {
			sum.Causes[c] += n
		}
		for t, ts := range s.ByTarget {
			m := sum.ByTarget[t]
			m.Requests += ts.Requests
			m.Failed += ts.Failed
			if !ts.First.IsZero() && (m.First.IsZero() || ts.First.Before(m.First)) {
				m.First = ts.First
			}
			if ts.Last.After(m.Last) {
				m.Last = ts.Last
			}
			sum.ByTarget[t] = m
		}
	}
	return sum
}

// Close closes every node (see Proxy.Close).
func (b *Balancer) Close() {
	for _, p := range b.nodes {
		p.Close()
	}
}
