package learn

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the book: per key, the bound a tail takes from
// it and its samples.
type collector struct{ book *Book }

var (
	learnedBoundDesc = prometheus.NewDesc("draingate_learned_propagation_seconds",
		"Per load balancer and namespace (key: lb:<ARN> ns:<namespace>, or tg:<target group ARN> ns:<namespace> while its load balancer is not known), how late its nodes may have sent after a target went out: the 0.99-quantile's bound at 95 % once 299 propagations were learnt, else the longest.",
		[]string{"key"}, nil)
	learnedSamplesDesc = prometheus.NewDesc("draingate_learned_propagation_samples",
		"Per load balancer and namespace, the propagations learnt (one per source of the load balancer per drain, at most 16), the last 7 days' and at most 512.",
		[]string{"key"}, nil)
	lagBoundDesc = prometheus.NewDesc("draingate_learned_lag_seconds",
		"Per load balancer (key as for draingate_learned_propagation_seconds), how long after a pod's deletion its target groups took it out: the 0.99-quantile's bound at 95 % once 299 pods were learnt, else the longest. An injected pod's max-wait is at least this plus the tail (up to --max-wait-ceiling).",
		[]string{"key"}, nil)
	lagSamplesDesc = prometheus.NewDesc("draingate_learned_lag_samples",
		"Per load balancer, the lags learnt (one per deleted pod whose agent asked), the last 7 days' and at most 512.",
		[]string{"key"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- learnedBoundDesc
	ch <- learnedSamplesDesc
	ch <- lagBoundDesc
	ch <- lagSamplesDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	if c.book == nil {
		return
	}
	for _, k := range c.book.Keys() {
		l := c.book.Estimate(k)
		bound, samples := learnedBoundDesc, learnedSamplesDesc
		if lb, ok := strings.CutPrefix(k, LagPrefix); ok {
			k, bound, samples = lb, lagBoundDesc, lagSamplesDesc
		}
		ch <- prometheus.MustNewConstMetric(bound, prometheus.GaugeValue, l.Bound.Seconds(), k)
		ch <- prometheus.MustNewConstMetric(samples, prometheus.GaugeValue, float64(l.N), k)
	}
}

// Collector exports what the book holds: per key, the bound a tail takes
// from it and its samples.
func (t *Timings) Collector() prometheus.Collector { return collector{t.book} }

// Describe sends the descriptions of the metrics Collector exports.
func Describe(ch chan<- *prometheus.Desc) { collector{}.Describe(ch) }
