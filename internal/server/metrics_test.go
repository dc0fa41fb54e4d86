package server

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/routetest"
	"draingate.dev/draingate/internal/version"
)

// draingate_build_info says which build runs, with the version the
// binary was stamped with.
func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "draingate_build_info" {
			continue
		}
		if len(mf.Metric) != 1 || mf.Metric[0].GetGauge().GetValue() != 1 {
			t.Fatalf("draingate_build_info: %v; want one series at 1", mf.Metric)
		}
		labels := map[string]string{}
		for _, l := range mf.Metric[0].Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != version.Version || labels["goversion"] == "" {
			t.Errorf("draingate_build_info labels %v; want version %q and the Go version", labels, version.Version)
		}
		return
	}
	t.Error("no draingate_build_info metric")
}

// MetricNames names the metrics of every part, histograms by family, and
// docs/reference.md lists each of draingate's own.
func TestMetricNames(t *testing.T) {
	names := MetricNames()
	if !slices.IsSorted(names) {
		t.Errorf("not sorted: %q", names)
	}
	for _, want := range []string{
		"draingate_wait_seconds", "draingate_waits_total", "draingate_terminating_pods", "draingate_build_info",
		"draingate_webhook_not_injected_total", "draingate_webhook_certificate_ready",
		"draingate_ledger_writes_total", "draingate_elbv2_calls_total", "draingate_lb_senders_known",
		"draingate_webhook_not_sized_total", "draingate_route_closes_total", "draingate_traffic_saved_seconds_total",
		"draingate_learned_propagation_seconds", "draingate_learned_lag_samples",
		"go_goroutines", "process_start_time_seconds",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("%s missing from %q", want, names)
		}
	}
	ref, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "draingate_") && !strings.Contains(string(ref), "`"+n) {
			t.Errorf("docs/reference.md does not list %s", n)
		}
	}
}

// describing is a kind of route with a metric of its own.
type describing struct{ routetest.Config }

func (describing) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc("draingate_toy_routes_seen_total", "Toy routes seen.", nil, nil)
}

// A kind's own metrics are named with the rest when it describes them; a
// kind that registers none is simply not asked.
func TestMetricNamesAskTheKinds(t *testing.T) {
	names := metricNames([]route.Kind{routetest.NewKind(), &describing{}})
	if !slices.Contains(names, "draingate_toy_routes_seen_total") || !slices.Contains(names, "draingate_terminating_pods") {
		t.Errorf("names %q: want the kind's own beside the server's", names)
	}
}
