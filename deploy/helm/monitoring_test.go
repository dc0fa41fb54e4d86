package helm_test

// The chart's alerts (templates/prometheusrule.yaml) and Grafana dashboard
// (dashboards/draingate.json): every PromQL expression parses with
// Prometheus's own parser and names only metrics the server exports, as
// server.MetricNames reads them from its collectors. The one other name
// allowed is Prometheus's own up, which DraingateDown needs.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"draingate.dev/draingate/internal/server"
)

// monitoringOn turns on both objects and the ServiceMonitor whose labels
// DraingateDown reads.
const monitoringOn = `
metrics: {serviceMonitor: {enabled: true}}
prometheusRule: {enabled: true, labels: {release: prom}}
grafanaDashboard: {enabled: true}
`

// alertRule is one rule of a PrometheusRule, as the Operator reads it.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func rulesIn(t *testing.T, r *rendered) []alertRule {
	t.Helper()
	prs := unstructuredOf(r, "monitoring.coreos.com/v1", "PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(prs))
	}
	groups, _, err := unstructured.NestedSlice(prs[0].Object, "spec", "groups")
	if err != nil || len(groups) == 0 {
		t.Fatalf("spec.groups: %v %v", groups, err)
	}
	js, err := json.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	var gs []struct {
		Name  string      `json:"name"`
		Rules []alertRule `json:"rules"`
	}
	if err := json.Unmarshal(js, &gs); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range gs {
		out = append(out, g.Rules...)
	}
	return out
}

func alertNames(rs []alertRule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Alert)
	}
	return out
}

// metricNames parses expr with Prometheus's parser and returns every
// metric name its selectors name, by name or by a __name__ matcher; a
// selector that names no single metric is an error.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				continue
			}
			if m.Type != labels.MatchEqual {
				bad = fmt.Errorf("selector %s matches metric names by pattern", vs)
			} else if name != "" && name != m.Value {
				bad = fmt.Errorf("selector %s names two metrics", vs)
			}
			name = m.Value
		}
		if name == "" && bad == nil {
			bad = fmt.Errorf("selector %s names no metric", vs)
		}
		names = append(names, name)
		return nil
	})
	return names, bad
}

// problems lists what is wrong with expr: a parse error, a selector that
// names no one metric, or a name the server does not export. A
// histogram's (or summary's) series are its family's name and _bucket,
// _sum or _count; up is allowed when allowUp.
func problems(expr string, exported []string, allowUp bool) []string {
	names, err := metricNames(expr)
	if err != nil {
		return []string{err.Error()}
	}
	if len(names) == 0 {
		return []string{"names no metric"}
	}
	var out []string
	for _, n := range names {
		family := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := strings.CutSuffix(n, suffix); ok && slices.Contains(exported, f) {
				family = f
			}
		}
		if !slices.Contains(exported, family) && (n != "up" || !allowUp) {
			out = append(out, fmt.Sprintf("names %s, which the server does not export", n))
		}
	}
	return out
}

func checkNames(t *testing.T, where, expr string, exported []string, allowUp bool) {
	t.Helper()
	for _, p := range problems(expr, exported, allowUp) {
		t.Errorf("%s: %q: %s", where, expr, p)
	}
}

// exportedMetrics are the server's metric families, every part on.
func exportedMetrics(t *testing.T) []string {
	t.Helper()
	names := server.MetricNames()
	for _, want := range []string{"draingate_waits_total", "draingate_wait_seconds", "draingate_elbv2_calls_total", "draingate_lb_senders_known", "draingate_webhook_not_injected_total"} {
		if !slices.Contains(names, want) {
			t.Fatalf("server.MetricNames() = %q lacks %s", names, want)
		}
	}
	return names
}

// operationsAnchors are the anchors of docs/operations.md's headings, as
// GitHub makes them.
func operationsAnchors(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`).FindAllStringSubmatch(string(b), -1) {
		out = append(out, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-"))
	}
	return out
}

// TestAlerts: each alert's expression parses and names only exported
// metrics (and up), waits a while before firing, has a severity, a
// summary, a description and a runbook in docs/operations.md; the up
// selector is the one the chart's ServiceMonitor produces.
func TestAlerts(t *testing.T) {
	exported := exportedMetrics(t)
	anchors := operationsAnchors(t)
	r := mustRender(t, monitoringOn)
	pr := unstructuredOf(r, "monitoring.coreos.com/v1", "PrometheusRule")[0]
	if pr.GetNamespace() != namespace || pr.GetLabels()["release"] != "prom" || pr.GetName() != "draingate" {
		t.Errorf("PrometheusRule %s/%s labels %v", pr.GetNamespace(), pr.GetName(), pr.GetLabels())
	}
	rules := rulesIn(t, r)
	want := []string{"DraingateDown", "DraingatePodsReleasedAtDeadline", "DraingatePodsAdmittedWithoutAgent",
		"DraingateWebhookCertificateNotReady", "DraingateELBv2Throttled", "DraingateAWSCallsDenied", "DraingateLoadBalancerSendersUnknown"}
	if got := alertNames(rules); !slices.Equal(got, want) {
		t.Errorf("alerts %q, want %q", got, want)
	}
	for _, ru := range rules {
		if ru.Alert == "" {
			t.Errorf("a recording rule or an unnamed alert: %+v", ru)
			continue
		}
		checkNames(t, ru.Alert, ru.Expr, exported, ru.Alert == "DraingateDown")
		if d, err := model.ParseDuration(ru.For); err != nil || d <= 0 {
			t.Errorf("%s: for %q: want a positive duration (%v)", ru.Alert, ru.For, err)
		}
		if s := ru.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
			t.Errorf("%s: severity %q", ru.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(ru.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", ru.Alert, a)
			}
		}
		page, anchor, _ := strings.Cut(ru.Annotations["runbook_url"], "#")
		if page != "docs/operations.md" || !slices.Contains(anchors, anchor) {
			t.Errorf("%s: runbook_url %q is not a heading of docs/operations.md", ru.Alert, ru.Annotations["runbook_url"])
		}
	}

	// DraingateDown reads up with the job and namespace the Prometheus
	// Operator gives the chart's ServiceMonitor's targets: the Service's
	// name (no jobLabel set) and namespace.
	sm := unstructuredOf(r, "monitoring.coreos.com/v1", "ServiceMonitor")[0]
	if jl, ok, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel"); ok {
		t.Fatalf("ServiceMonitor sets jobLabel %q: DraingateDown's job is no longer the Service's name", jl)
	}
	var metricsSvc *corev1.Service
	for _, s := range all[*corev1.Service](r) {
		if s.Labels["app.kubernetes.io/component"] == "metrics" {
			metricsSvc = s
		}
	}
	down := rules[slices.IndexFunc(rules, func(r alertRule) bool { return r.Alert == "DraingateDown" })]
	e, err := parser.NewParser(parser.Options{}).ParseExpr(down.Expr)
	if err != nil {
		t.Fatal(err)
	}
	var sel map[string]string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name == "up" {
			sel = map[string]string{}
			for _, m := range vs.LabelMatchers {
				if m.Type == labels.MatchEqual && m.Name != labels.MetricName {
					sel[m.Name] = m.Value
				}
			}
		}
		return nil
	})
	if metricsSvc == nil {
		t.Fatal("no metrics Service")
	}
	if sel["job"] != metricsSvc.Name || sel["namespace"] != sm.GetNamespace() || len(sel) != 2 {
		t.Errorf("DraingateDown selects up%v; the ServiceMonitor's targets have job %s, namespace %s", sel, metricsSvc.Name, sm.GetNamespace())
	}

	// Alerts follow the parts turned on, and the runbook base.
	r = mustRender(t, `
prometheusRule: {enabled: true, namespace: monitoring, runbookBaseURL: "https://git.example/draingate/docs/operations.md"}
targetGroups: false
webhook: {enabled: false}
`)
	rules = rulesIn(t, r)
	if got := alertNames(rules); !slices.Equal(got, []string{"DraingatePodsReleasedAtDeadline"}) {
		t.Errorf("without ServiceMonitor, target groups and webhook: alerts %q", got)
	}
	if u := rules[0].Annotations["runbook_url"]; u != "https://git.example/draingate/docs/operations.md#draingatepodsreleasedatdeadline" {
		t.Errorf("runbook_url %q", u)
	}
	if ns := unstructuredOf(r, "monitoring.coreos.com/v1", "PrometheusRule")[0].GetNamespace(); ns != "monitoring" {
		t.Errorf("prometheusRule.namespace: PrometheusRule in %s", ns)
	}
	r = mustRender(t, "prometheusRule: {enabled: true}\ntrafficEvidence: {enabled: false}")
	if got := alertNames(rulesIn(t, r)); slices.Contains(got, "DraingateLoadBalancerSendersUnknown") {
		t.Errorf("traffic evidence off (no node lists read): alerts %q", got)
	}
}

// grafanaVars are Grafana's variables in a query: $x, ${x}, ${x:fmt}.
var grafanaVars = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\}|\$([A-Za-z0-9_]+)`)

// promQL replaces a query's Grafana variables with values Prometheus
// would take: an interval for Grafana's own, "x" (within a label
// matcher's quotes) for the dashboard's; an unknown variable is an error.
func promQL(q string, defined []string) (string, error) {
	var err error
	out := grafanaVars.ReplaceAllStringFunc(q, func(v string) string {
		m := grafanaVars.FindStringSubmatch(v)
		name := m[1] + m[2]
		switch {
		case slices.Contains([]string{"__rate_interval", "__interval", "__range"}, name):
			return "5m"
		case slices.Contains(defined, name):
			return "x"
		}
		err = fmt.Errorf("unknown variable $%s", name)
		return v
	})
	return out, err
}

// TestDashboard: the ConfigMap carries dashboards/draingate.json for the
// sidecar; every query parses and names only exported metrics; every
// datasource is the $datasource variable.
func TestDashboard(t *testing.T) {
	exported := exportedMetrics(t)
	r := mustRender(t, monitoringOn)
	var cm *corev1.ConfigMap
	for _, c := range all[*corev1.ConfigMap](r) {
		if c.Name == "draingate-dashboard" {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap draingate-dashboard")
	}
	if cm.Namespace != namespace || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	file, err := os.ReadFile(chartDir + "/dashboards/draingate.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(cm.Data["draingate.json"]) != strings.TrimSpace(string(file)) {
		t.Errorf("the ConfigMap's draingate.json is not dashboards/draingate.json")
	}
	var dash struct {
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(file, &dash); err != nil {
		t.Fatalf("dashboards/draingate.json: %v", err)
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
		switch v.Type {
		case "datasource":
			if v.Name != "datasource" || v.Query != "prometheus" {
				t.Errorf("datasource variable %q of %v", v.Name, v.Query)
			}
		case "query":
			// label_values(selector, label): the selector names a metric too.
			q, _ := v.Query.(map[string]any)["query"].(string)
			m := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`).FindStringSubmatch(q)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
				continue
			}
			sel, err := promQL(m[1], vars)
			if err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
			checkNames(t, "variable "+v.Name, sel, exported, false)
		}
	}
	if !slices.Contains(vars, "datasource") {
		t.Errorf("no datasource variable: %q", vars)
	}

	var walk func(ps []panel)
	count := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				count++
				where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
				if tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: datasource %+v", where, tg.Datasource)
				}
				q, err := promQL(tg.Expr, vars)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				checkNames(t, where, q, exported, false)
			}
		}
	}
	walk(dash.Panels)
	if count < 10 {
		t.Errorf("only %d queries found in the dashboard", count)
	}

	// No datasource UID is written down anywhere.
	for _, m := range regexp.MustCompile(`"uid": *"([^"]*)"`).FindAllStringSubmatch(string(file), -1) {
		if m[1] != "${datasource}" && m[1] != "draingate" {
			t.Errorf("uid %q in the dashboard", m[1])
		}
	}

	r = mustRender(t, "grafanaDashboard: {enabled: true, namespace: grafana, labels: {grafana_dashboard: '0', team: edge}}")
	cm = one[*corev1.ConfigMap](t, r)
	if cm.Namespace != "grafana" || cm.Labels["grafana_dashboard"] != "0" || cm.Labels["team"] != "edge" {
		t.Errorf("ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
}

// panel is a dashboard panel, as far as the test reads it.
type panel struct {
	Title      string  `json:"title"`
	Type       string  `json:"type"`
	Datasource source  `json:"datasource"`
	Panels     []panel `json:"panels"`
	Targets    []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource source `json:"datasource"`
	} `json:"targets"`
}

type source struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestMonitoringOff: with the defaults, or without metrics, neither the
// PrometheusRule nor the dashboard renders.
func TestMonitoringOff(t *testing.T) {
	for _, overrides := range []string{"", "metrics: {enabled: false}\nprometheusRule: {enabled: true}\ngrafanaDashboard: {enabled: true}"} {
		r := mustRender(t, overrides)
		if n := len(unstructuredOf(r, "monitoring.coreos.com/v1", "PrometheusRule")); n != 0 {
			t.Errorf("%q: %d PrometheusRules", overrides, n)
		}
		for _, c := range all[*corev1.ConfigMap](r) {
			t.Errorf("%q: ConfigMap %s rendered", overrides, c.Name)
		}
	}
}

// The parser finds what the checks rely on: a misspelt metric, a pattern
// for a name, a syntax error and an unknown Grafana variable all fail.
func TestMonitoringChecksCatch(t *testing.T) {
	exported := []string{"draingate_waits_total", "draingate_wait_seconds"}
	for _, c := range []struct {
		expr string
		ok   bool
	}{
		{`sum(rate(draingate_waits_total{outcome="deadline"}[5m])) > 0`, true},
		{`histogram_quantile(0.9, sum by (le) (rate(draingate_wait_seconds_bucket[5m])))`, true},
		{`sum(rate(draingate_wait_total[5m]))`, false},
		{`{__name__=~"draingate_.*"}`, false},
		{`sum(rate(draingate_waits_total[5m])`, false},
		{`absent(up == 1)`, false},
	} {
		if p := problems(c.expr, exported, false); (len(p) == 0) != c.ok {
			t.Errorf("%q: problems %q, want ok %v", c.expr, p, c.ok)
		}
	}
	if _, err := promQL(`rate(x{a="$nope"}[$__rate_interval])`, []string{"namespace"}); err == nil {
		t.Error("an unknown variable passes")
	}
}
