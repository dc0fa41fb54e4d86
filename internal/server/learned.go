package server

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/learn"
	"draingate.dev/draingate/internal/route"
)

// What the drains teach (issue: learned timings). When the traffic
// evidence closes a route of a kind that learns (route.Learner), each
// source it trusted stopped sending some time after the route went out:
// how late that load balancer's nodes learn of a deregistration. The
// server keeps those durations per load balancer (learn.Book), shares
// them through Leases (ledger.Learned) and hands them to the kinds, which
// lengthen their tails by them (learn.Learned.Tail): a route whose sources
// could not be fitted (a quiet pod) then waits as long as the busy pods
// behind the same load balancer showed it needs.

// learnSyncEvery is how often a replica merges the learned Leases and
// writes what it learnt.
const learnSyncEvery = 30 * time.Second

// learnStops records what a closed route taught: each stop's delay after
// the route went out, under the key its kind gives the route.
func (s *Server) learnStops(k gate.RouteKey, outSince time.Time, stops []evidence.Stop) {
	if s.book == nil {
		return
	}
	for _, src := range s.sources {
		l, ok := src.(route.Learner)
		if !ok || src.Kind() != k.Kind {
			continue
		}
		key := l.LearnKey(k.Name)
		if key == "" {
			return
		}
		for _, st := range stops {
			s.book.Add(key, st.At, st.At.Sub(outSince))
		}
		return
	}
}

// learnedLocked hands what the step that made next taught to learn, once
// per route of the pod.
func (p *pods) learnedLocked(st *podState, next gate.Memory) {
	if p.learn == nil {
		return
	}
	for k, m := range next.Routes {
		if len(m.Stops) == 0 || m.OutSince.IsZero() || st.learnt[k] {
			continue
		}
		if st.learnt == nil {
			st.learnt = map[gate.RouteKey]bool{}
		}
		st.learnt[k] = true
		p.learn(k, m.OutSince, m.Stops)
	}
}

// runLearned syncs the book with its Leases: once before the server
// serves (a restart starts from what was learnt), then in the background.
func (s *Server) runLearned(ctx context.Context) {
	if s.learned == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := s.learned.Sync(sctx); err != nil {
		s.log.Warn("learned propagation: could not read or write its Leases at start; tails are lengthened by what this replica learns", "err", err)
	}
	cancel()
	go s.learned.Run(ctx, learnSyncEvery)
}

// learnedCollector exports the book: per key, the bound a tail takes from
// it and its samples.
type learnedCollector struct{ book *learn.Book }

var (
	learnedBoundDesc = prometheus.NewDesc("draingate_learned_propagation_seconds",
		"Per load balancer (key: lb:<ARN>, or tg:<target group ARN> while its load balancer is not known), how late its nodes were seen sending after a target went out: the 0.99-quantile's bound at 95 % once 299 drains were learnt, else the longest. A tail shorter than this is lengthened to it.",
		[]string{"key"}, nil)
	learnedSamplesDesc = prometheus.NewDesc("draingate_learned_propagation_samples",
		"Per load balancer, the propagations learnt (one per load balancer node per drain the traffic evidence closed), the last 7 days' and at most 512.",
		[]string{"key"}, nil)
	lagBoundDesc = prometheus.NewDesc("draingate_learned_lag_seconds",
		"Per load balancer (key as for draingate_learned_propagation_seconds), how long after a pod's deletion its target groups took it out: the 0.99-quantile's bound at 95 % once 299 pods were learnt, else the longest. An injected pod's max-wait is at least this plus the tail (up to --max-wait-ceiling).",
		[]string{"key"}, nil)
	lagSamplesDesc = prometheus.NewDesc("draingate_learned_lag_samples",
		"Per load balancer, the lags learnt (one per deleted pod whose agent asked), the last 7 days' and at most 512.",
		[]string{"key"}, nil)
)

func (c learnedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- learnedBoundDesc
	ch <- learnedSamplesDesc
	ch <- lagBoundDesc
	ch <- lagSamplesDesc
}

func (c learnedCollector) Collect(ch chan<- prometheus.Metric) {
	if c.book == nil {
		return
	}
	for _, k := range c.book.Keys() {
		l := c.book.Learned(k)
		bound, samples := learnedBoundDesc, learnedSamplesDesc
		if lb, ok := strings.CutPrefix(k, learn.LagPrefix); ok {
			k, bound, samples = lb, lagBoundDesc, lagSamplesDesc
		}
		ch <- prometheus.MustNewConstMetric(bound, prometheus.GaugeValue, l.Bound.Seconds(), k)
		ch <- prometheus.MustNewConstMetric(samples, prometheus.GaugeValue, float64(l.N), k)
	}
}
