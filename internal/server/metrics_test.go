package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
