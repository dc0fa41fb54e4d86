// Package helm_test checks the draingate chart (deploy/helm/draingate) the way
// Helm itself would load, lint and render it, offline and without a helm
// binary, and asserts what the rendered objects do: the server's command
// line follows the values, the pod is restricted, RBAC is the least set, the
// webhook sees pod CREATE in opted-in places only, and README.md lists every
// value with its default.
package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"draingate.dev/draingate/internal/prestop"
	"draingate.dev/draingate/internal/server"
	"draingate.dev/draingate/release/chart"
)

const (
	chartDir = "draingate"
	// The documented install: release draingate in draingate-system, which
	// gives the agent's built-in server URL.
	release   = "draingate"
	namespace = "draingate-system"
	injectKey = "draingate.dev/inject"
)

// rendered is one render of the chart: its objects, decoded, and its NOTES.
type rendered struct {
	objs  []runtime.Object
	text  map[string]string // rendered template files by name, e.g. "templates/rbac.yaml"
	notes string
}

// kubeVersion is the cluster version the chart is rendered and linted for:
// the one the project's test cluster runs.
const kubeVersion = "v1.37.2"

func parsedKubeVersion(t *testing.T) *common.KubeVersion {
	t.Helper()
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// renderChart renders the chart as helm install would (release/chart's
// Render, strict), with the values given as YAML (like a -f file) over the
// chart's values.yaml, and decodes what it rendered.
func renderChart(t *testing.T, name, overrides string) (*rendered, error) {
	t.Helper()
	vals, err := common.ReadValues([]byte(overrides))
	if err != nil {
		t.Fatalf("values %q: %v", overrides, err)
	}
	files, err := chart.Render(namespace, name, vals, kubeVersion)
	if err != nil {
		return nil, err
	}
	r := &rendered{text: map[string]string{}}
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	deserializer := codecs.UniversalDeserializer()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		base := filepath.Base(n)
		switch {
		case strings.HasPrefix(base, "_"):
			continue
		case base == "NOTES.txt":
			r.notes = files[n]
			continue
		}
		r.text[strings.TrimPrefix(n, chartDir+"/")] = files[n]
		for i, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(files[n], -1) {
			js, err := sigsyaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s document %d is not YAML: %v\n%s", n, i, err, doc)
			}
			if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
				continue // comments only, or a disabled part
			}
			obj, _, err := deserializer.Decode(js, nil, nil)
			if runtime.IsNotRegisteredError(err) {
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(js); err != nil {
					t.Fatalf("%s document %d: %v", n, i, err)
				}
				obj, err = u, nil
			}
			if err != nil {
				t.Fatalf("%s document %d does not decode strictly: %v\n%s", n, i, err, doc)
			}
			r.objs = append(r.objs, obj)
		}
	}
	return r, nil
}

// mustRender renders with the documented release name.
func mustRender(t *testing.T, overrides string) *rendered {
	t.Helper()
	r, err := renderChart(t, release, overrides)
	if err != nil {
		t.Fatalf("render with %q: %v", overrides, err)
	}
	return r
}

func all[T runtime.Object](r *rendered) []T {
	var out []T
	for _, o := range r.objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func one[T runtime.Object](t *testing.T, r *rendered) T {
	t.Helper()
	objs := all[T](r)
	if len(objs) != 1 {
		var zero T
		t.Fatalf("want one %T, got %d", zero, len(objs))
	}
	return objs[0]
}

func unstructuredOf(r *rendered, apiVersion, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range all[*unstructured.Unstructured](r) {
		if u.GetAPIVersion() == apiVersion && u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

func serviceNamed(t *testing.T, r *rendered, name string) *corev1.Service {
	t.Helper()
	for _, s := range all[*corev1.Service](r) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %s", name)
	return nil
}

func serverContainer(t *testing.T, r *rendered) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := one[*appsv1.Deployment](t, r)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(d.Spec.Template.Spec.Containers))
	}
	return d, &d.Spec.Template.Spec.Containers[0]
}

// flagsOf reads `serve --a=b ...` into a map, failing on a repeated flag or
// one not in --name=value form.
func flagsOf(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q do not start with serve", args)
	}
	out := map[string]string{}
	for _, a := range args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("arg %q is not --flag=value", a)
		}
		if _, dup := out[name]; dup {
			t.Fatalf("flag --%s given twice in %q", name, args)
		}
		out[name] = value
	}
	return out
}

func TestChartLoadsAndLints(t *testing.T) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatal(err)
	}
	m := ch.Metadata
	if m.APIVersion != "v2" || m.Name != "draingate" || m.Version != "0.1.0" || m.AppVersion != "v0.1.0" {
		t.Errorf("Chart.yaml: apiVersion %s name %s version %s appVersion %s, want v2 draingate 0.1.0 v0.1.0 (the release's tag, as make chart sets it)", m.APIVersion, m.Name, m.Version, m.AppVersion)
	}
	for _, overrides := range []string{
		"",
		"webhook: {enabled: false}",
		"webhook: {failurePolicy: Fail, certManager: {enabled: true}}",
		"metrics: {serviceMonitor: {enabled: true}}",
		"metrics: {serviceMonitor: {enabled: true}}\nprometheusRule: {enabled: true}\ngrafanaDashboard: {enabled: true}",
		"replicaCount: 1",
	} {
		vals, err := common.ReadValues([]byte(overrides))
		if err != nil {
			t.Fatal(err)
		}
		res := lint.RunAll(chartDir, vals, namespace, lint.WithKubeVersion(parsedKubeVersion(t)))
		for _, msg := range res.Messages {
			if msg.Severity >= support.WarningSev {
				t.Errorf("lint with %q: %v", overrides, msg)
			} else {
				t.Logf("lint with %q: %v", overrides, msg)
			}
		}
	}
	// The linter reads the rendered templates: a copy of the chart with
	// one broken template fails it. (Lint mode ignores fail and required,
	// so a bad value is not the way to show that.)
	broken := copyChart(t)
	f, err := os.OpenFile(filepath.Join(broken, "templates", "service.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "\n  ports: [")
	f.Close()
	if res := lint.RunAll(broken, nil, namespace, lint.WithKubeVersion(parsedKubeVersion(t))); res.HighestSeverity < support.ErrorSev {
		t.Errorf("lint accepts a template that renders invalid YAML: %v", res.Messages)
	}
}

// copyChart copies the chart into a temporary folder named like it.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), chartDir)
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// serverFlags are the flags `draingate serve` defines, the server's own and
// every kind of route's, as its -h lists them: a new flag the chart does
// not pass fails this test.
func serverFlags(t *testing.T) []string {
	t.Helper()
	var out, help bytes.Buffer
	if code := server.Main(context.Background(), []string{"serve", "-h"}, func(string) string { return "" }, &out, &help); code != 0 {
		t.Fatalf("draingate serve -h: exit %d: %s", code, help.String())
	}
	re := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	var flags []string
	for _, m := range re.FindAllStringSubmatch(help.String(), -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "listen") || !slices.Contains(flags, "tail-nlb") {
		t.Fatalf("found flags %q in draingate serve -h: the pattern no longer finds them, update this test", flags)
	}
	return flags
}

// serverDefaults reads draingate serve -h: each flag's default as printed
// ("" where the flag's zero value is its default).
func serverDefaults(t *testing.T) map[string]string {
	t.Helper()
	var out, help bytes.Buffer
	if code := server.Main(context.Background(), []string{"serve", "-h"}, func(string) string { return "" }, &out, &help); code != 0 {
		t.Fatalf("draingate serve -h: exit %d: %s", code, help.String())
	}
	re := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)[^\n]*\n\s+[^\n]*?(?: \(default ([^)]*)\))?$`)
	defaults := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(help.String(), -1) {
		if q, err := strconv.Unquote(m[2]); err == nil {
			m[2] = q // strings are printed quoted
		}
		defaults[m[1]] = m[2]
	}
	if defaults["aws-burst"] == "" || defaults["inject-max-wait"] == "" {
		t.Fatalf("read defaults %q from draingate serve -h: the pattern no longer finds them, update this test", defaults)
	}
	return defaults
}

// sameSetting says whether the chart's value and the binary's default say
// the same thing: durations and numbers compared by value ("300s" is
// "5m0s"), a flag printed with no default is false, 0 or empty.
func sameSetting(chart, binary string) bool {
	if chart == binary {
		return true
	}
	if a, err := time.ParseDuration(chart); err == nil {
		b, err := time.ParseDuration(binary)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(chart, 64); err == nil {
		if binary == "" {
			return a == 0
		}
		b, err := strconv.ParseFloat(binary, 64)
		return err == nil && a == b
	}
	return binary == "" && chart == "false"
}

// TestOneDefault: a setting has one default, whether draingate runs from
// the chart or from its own command line; the chart differs only where it
// must name what the binary cannot know (its own Service, namespace,
// Secret and images) or chooses a container's form (listening on every
// address, the pod-only wait API).
func TestOneDefault(t *testing.T) {
	_, c := serverContainer(t, mustRender(t, ""))
	chartOnly := map[string]bool{"listen": true, "metrics-listen": true, "webhook-listen": true, "webhook-config": true,
		"webhook-secret": true, "webhook-service": true, "webhook-namespace": true, "agent-image": true, "agent-server": true,
		"namespace": true, "wait-api-sources": true}
	defaults := serverDefaults(t)
	for f, v := range flagsOf(t, c.Args) {
		if b, ok := defaults[f]; ok && !chartOnly[f] && !sameSetting(v, b) {
			t.Errorf("the chart sets --%s=%s by default, draingate serve defaults to %q: give the setting one default", f, v, b)
		}
	}
}

func TestDefaultArgs(t *testing.T) {
	r := mustRender(t, "")
	_, c := serverContainer(t, r)
	if c.Image != "ghcr.io/draingate/draingate:v0.1.0" {
		t.Errorf("image %s, want ghcr.io/draingate/draingate:v0.1.0 (the release's repository, the appVersion)", c.Image)
	}
	got := flagsOf(t, c.Args)
	want := map[string]string{
		"listen":                 ":8080",
		"metrics-listen":         ":9090",
		"target-groups":          "true",
		"aws-rate":               "1",
		"aws-burst":              "5",
		"poll-interval":          "2s",
		"lb-nodes-refresh":       "60s",
		"tail-endpointslice":     "5s",
		"tail-alb":               "20s",
		"tail-nlb":               "300s",
		"tail-local-policy":      "60s",
		"tail-external":          "40s",
		"external-routes":        "auto",
		"max-wait":               "30s",
		"traffic-evidence":       "true",
		"traffic-epsilon":        "1e-06",
		"traffic-early-close":    "false",
		"learn-tails":            "true",
		"learn-tails-shorten":    "true",
		"learn-lag":              "true",
		"max-wait-ceiling":       "10m",
		"shutdown-reserve":       "5s",
		"log-format":             "text",
		"log-level":              "info",
		"webhook-listen":         ":9443",
		"webhook-config":         "draingate",
		"webhook-secret":         "draingate-webhook-tls",
		"webhook-service":        "draingate",
		"webhook-namespace":      "$(DRAINGATE_WEBHOOK_NAMESPACE)",
		"webhook-cert-manager":   "false",
		"agent-image":            "ghcr.io/draingate/draingate-prestop:v0.1.0",
		"agent-server":           "http://draingate.draingate-system.svc:8080",
		"inject-max-wait":        "90s",
		"inject-fallback":        "30s",
		"inject-shutdown-budget": "30s",
		"inject-image-volume":    "false",
		"inject-watcher":         "true",
		"wait-api-sources":       "pod",
		"profiling":              "false",
		"namespace":              "$(DRAINGATE_NAMESPACE)",
		"kube-api-qps":           "50",
		"kube-api-burst":         "100",
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("--%s=%q, want %q", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected --%s=%s (empty settings stay off the command line so DRAINGATE_* env can set them)", k, got[k])
		}
	}
	// The documented install needs no agent setting: the agent's own default is this release's Service.
	if got["agent-server"] != prestop.DefaultServer {
		t.Errorf("--agent-server %s differs from the agent's default %s", got["agent-server"], prestop.DefaultServer)
	}
	// --webhook-namespace=$(VAR) is expanded by the kubelet from this env var.
	var found bool
	for _, e := range c.Env {
		if e.Name == "DRAINGATE_WEBHOOK_NAMESPACE" {
			found = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
		}
	}
	if !found {
		t.Errorf("no DRAINGATE_WEBHOOK_NAMESPACE from the downward API metadata.namespace in %v", c.Env)
	}

	// Every flag draingate serve defines is set by the chart, by default or
	// by a value (TestArgsFollowValues covers the ones only given when set).
	setBySomeValue := map[string]bool{"aws-region": true, "elbv2-endpoint": true, "ec2-endpoint": true, "kubeconfig": true,
		"inject-installer-requests": true, "inject-installer-limits": true, "inject-pull-secrets": true,
		"inject-watcher-requests": true, "inject-watcher-limits": true}
	defined := serverFlags(t)
	for _, f := range defined {
		if _, ok := got[f]; !ok && !setBySomeValue[f] {
			t.Errorf("draingate serve has --%s but the chart never passes it", f)
		}
	}
	for f := range got {
		if !slices.Contains(defined, f) {
			t.Errorf("the chart passes --%s, which draingate serve does not define: the server would refuse to start", f)
		}
	}
}

// TestArgsFollowValues changes one value at a time and looks for it on the
// server's command line.
func TestArgsFollowValues(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   map[string]string // flag → value; "-" for absent
	}{
		{"ports: {http: 8081}", map[string]string{"listen": ":8081", "agent-server": "http://draingate.draingate-system.svc:8081"}},
		{"ports: {metrics: 9191}", map[string]string{"metrics-listen": ":9191"}},
		{"metrics: {enabled: false}", map[string]string{"metrics-listen": ""}},
		{"metrics: {profiling: true}", map[string]string{"profiling": "true", "metrics-listen": ":9090"}},
		{"ports: {webhook: 10443}", map[string]string{"webhook-listen": ":10443"}},
		{"targetGroups: false", map[string]string{"target-groups": "false"}},
		{"aws: {region: eu-west-1, elbv2Endpoint: 'https://vpce-1.elasticloadbalancing.eu-west-1.vpce.amazonaws.com', rate: 0.5, burst: 3}",
			map[string]string{"aws-region": "eu-west-1", "elbv2-endpoint": "https://vpce-1.elasticloadbalancing.eu-west-1.vpce.amazonaws.com", "aws-rate": "0.5", "aws-burst": "3"}},
		{"aws: {rate: 4}", map[string]string{"aws-rate": "4", "aws-region": "-", "elbv2-endpoint": "-", "ec2-endpoint": "-"}},
		{"aws: {ec2Endpoint: 'https://vpce-2.ec2.eu-west-1.vpce.amazonaws.com'}", map[string]string{"ec2-endpoint": "https://vpce-2.ec2.eu-west-1.vpce.amazonaws.com", "elbv2-endpoint": "-"}},
		{"lbNodesRefresh: 2m", map[string]string{"lb-nodes-refresh": "2m", "poll-interval": "2s"}},
		// helm --set aws.rate=0.25 gives the string "0.25".
		{"aws: {rate: '0.25'}", map[string]string{"aws-rate": "0.25"}},
		{"pollInterval: 7s", map[string]string{"poll-interval": "7s"}},
		{"tails: {endpointSlice: 8s}", map[string]string{"tail-endpointslice": "8s", "tail-alb": "20s"}},
		{"tails: {alb: 45s}", map[string]string{"tail-alb": "45s", "tail-nlb": "300s"}},
		{"tails: {nlb: 4m}", map[string]string{"tail-nlb": "4m"}},
		{"maxWait: 20s", map[string]string{"max-wait": "20s"}},
		{"shutdownReserve: 9s", map[string]string{"shutdown-reserve": "9s"}},
		{"logFormat: json", map[string]string{"log-format": "json"}},
		{"logLevel: debug", map[string]string{"log-level": "debug"}},
		{"waitApiSources: any", map[string]string{"wait-api-sources": "any"}},
		{"webhook: {certManager: {enabled: true}}", map[string]string{"webhook-cert-manager": "true"}},
		{"agent: {image: {repository: registry.example/dg-agent, tag: v9}}", map[string]string{"agent-image": "registry.example/dg-agent:v9"}},
		{"agent: {server: 'http://gate.example:8080'}", map[string]string{"agent-server": "http://gate.example:8080"}},
		{"agent: {maxWait: 3m}", map[string]string{"inject-max-wait": "3m"}},
		{"agent: {fallback: 12s}", map[string]string{"inject-fallback": "12s"}},
		{"agent: {shutdownBudget: 45s}", map[string]string{"inject-shutdown-budget": "45s"}},
		{"agent: {imageVolume: true}", map[string]string{"inject-image-volume": "true", "inject-installer-requests": "-", "inject-pull-secrets": "-"}},
		{"agent: {installer: {resources: {requests: {cpu: 50m, memory: 16Mi}, limits: {cpu: 100m, ephemeral-storage: 32Mi}}}}",
			map[string]string{"inject-installer-requests": "cpu=50m,memory=16Mi", "inject-installer-limits": "cpu=100m,ephemeral-storage=32Mi"}},
		{"agent: {watcher: {enabled: false}}", map[string]string{"inject-watcher": "false", "inject-watcher-requests": "-"}},
		{"agent: {watcher: {resources: {requests: {cpu: 20m}, limits: {cpu: 200m, memory: 64Mi}}}}",
			map[string]string{"inject-watcher-requests": "cpu=20m", "inject-watcher-limits": "cpu=200m,memory=64Mi", "inject-installer-requests": "-"}},
		{"agent: {image: {pullSecrets: [agent-registry, other]}}", map[string]string{"inject-pull-secrets": "agent-registry,other"}},
		{"fullnameOverride: gate", map[string]string{"webhook-config": "gate", "webhook-secret": "gate-webhook-tls", "webhook-service": "gate", "agent-server": "http://gate.draingate-system.svc:8080"}},
		{"extraArgs: ['--kubeconfig=/etc/kube/config']", map[string]string{"kubeconfig": "/etc/kube/config"}},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, c := serverContainer(t, mustRender(t, tc.values))
			got := flagsOf(t, c.Args)
			for k, v := range tc.want {
				g, ok := got[k]
				switch {
				case v == "-" && ok:
					t.Errorf("--%s=%s given, want it left off", k, g)
				case v != "-" && (!ok || g != v):
					t.Errorf("--%s=%q (given: %v), want %q", k, g, ok, v)
				}
			}
		})
	}
}

func TestOtherValues(t *testing.T) {
	r := mustRender(t, `
image: {repository: registry.example/draingate, tag: v2, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: 'arn:aws:iam::111122223333:role/draingate'}}
podAnnotations: {a.example/b: c}
podLabels: {team: edge}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
priorityClassName: system-cluster-critical
replicaCount: 3
extraEnv: [{name: DRAINGATE_AWS_REGION, value: us-west-2}]
resources: {limits: {memory: 512Mi}}
`)
	d, c := serverContainer(t, r)
	p := d.Spec.Template.Spec
	if c.Image != "registry.example/draingate:v2" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
	}
	if len(p.ImagePullSecrets) != 1 || p.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v", p.ImagePullSecrets)
	}
	sa := one[*corev1.ServiceAccount](t, r)
	if sa.Annotations["eks.amazonaws.com/role-arn"] != "arn:aws:iam::111122223333:role/draingate" || p.ServiceAccountName != sa.Name {
		t.Errorf("ServiceAccount %s %v, pod runs as %s", sa.Name, sa.Annotations, p.ServiceAccountName)
	}
	if d.Spec.Template.Annotations["a.example/b"] != "c" || d.Spec.Template.Labels["team"] != "edge" {
		t.Errorf("pod metadata %v %v", d.Spec.Template.Annotations, d.Spec.Template.Labels)
	}
	if p.NodeSelector["kubernetes.io/os"] != "linux" || len(p.Tolerations) != 1 || p.Tolerations[0].Key != "dedicated" {
		t.Errorf("nodeSelector %v tolerations %v", p.NodeSelector, p.Tolerations)
	}
	if p.PriorityClassName != "system-cluster-critical" || *d.Spec.Replicas != 3 {
		t.Errorf("priorityClassName %q replicas %d", p.PriorityClassName, *d.Spec.Replicas)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DRAINGATE_AWS_REGION" && e.Value == "us-west-2" }) {
		t.Errorf("extraEnv missing from %v", c.Env)
	}
	if m := c.Resources.Limits[corev1.ResourceMemory]; m.String() != "512Mi" {
		t.Errorf("memory limit %s", m.String())
	}
	// A values override merges: the default requests stay.
	if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.String() != "50m" {
		t.Errorf("cpu request %s", cpu.String())
	}

	// A ServiceAccount made elsewhere: none rendered, RBAC bound to it.
	r = mustRender(t, "serviceAccount: {create: false, name: existing}")
	if n := len(all[*corev1.ServiceAccount](r)); n != 0 {
		t.Errorf("%d ServiceAccounts rendered with create false", n)
	}
	d, _ = serverContainer(t, r)
	if d.Spec.Template.Spec.ServiceAccountName != "existing" {
		t.Errorf("pod runs as %s", d.Spec.Template.Spec.ServiceAccountName)
	}
	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		if b.Subjects[0].Name != "existing" {
			t.Errorf("%s binds %v", b.Name, b.Subjects)
		}
	}
	if _, err := renderChart(t, release, "serviceAccount: {create: false}"); err == nil || !strings.Contains(err.Error(), "serviceAccount.name") {
		t.Errorf("create false without a name: %v, want an error naming serviceAccount.name", err)
	}
}

func TestDeploymentShape(t *testing.T) {
	r := mustRender(t, "")
	d, c := serverContainer(t, r)
	if d.Namespace != namespace || *d.Spec.Replicas != 2 {
		t.Errorf("Deployment %s/%s replicas %d", d.Namespace, d.Name, *d.Spec.Replicas)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	if !sel.Matches(podLabels) {
		t.Errorf("selector %s does not match the pod labels %v", sel, podLabels)
	}
	if podLabels[injectKey] != "disabled" {
		t.Errorf("pod label %s=%q, want disabled so the webhook never injects the server", injectKey, podLabels[injectKey])
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v, want maxUnavailable 0 so a gate is always up", ru)
	}

	// Spread over nodes, preferred (a one-node cluster still runs both).
	aa := d.Spec.Template.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("affinity %+v, want one preferred anti-affinity term", aa)
	}
	term := aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	ts, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil {
		t.Fatal(err)
	}
	if term.TopologyKey != corev1.LabelHostname || !ts.Matches(podLabels) {
		t.Errorf("anti-affinity on %s with %s, want kubernetes.io/hostname matching its own pods", term.TopologyKey, ts)
	}
	// And over zones, where the scheduler can (never blocking it).
	if tsc := d.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != corev1.LabelTopologyZone ||
		tsc[0].MaxSkew != 1 || tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway || !selects(t, tsc[0].LabelSelector, podLabels) {
		t.Errorf("topology spread %+v, want one ScheduleAnyway zone spread of its own pods", tsc)
	}
	spread, _ := serverContainer(t, mustRender(t, "topologySpreadConstraints: [{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]"))
	if tsc := spread.Spec.Template.Spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].TopologyKey != corev1.LabelHostname || tsc[0].MaxSkew != 2 {
		t.Errorf("topologySpreadConstraints value: %+v, want it instead of the default", tsc)
	}
	custom, _ := serverContainer(t, mustRender(t, "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Exists}]}]}}}"))
	if a := custom.Spec.Template.Spec.Affinity; a.NodeAffinity == nil || a.PodAntiAffinity != nil {
		t.Errorf("affinity value %+v, want it instead of the default", a)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["metrics"] != 9090 || ports["webhook"] != 9443 {
		t.Errorf("container ports %v", ports)
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on port http", pr.name, pr.probe, pr.path)
		}
	}
	req, lim := c.Resources.Requests, c.Resources.Limits
	if cpu, mem, lmem := req[corev1.ResourceCPU], req[corev1.ResourceMemory], lim[corev1.ResourceMemory]; cpu.String() != "50m" || mem.String() != "64Mi" || lmem.String() != "256Mi" {
		t.Errorf("resources %+v, want requests cpu 50m memory 64Mi, limit memory 256Mi", c.Resources)
	}
	if _, ok := lim[corev1.ResourceCPU]; ok {
		t.Errorf("cpu limit set: a burst of terminating pods would be throttled")
	}
	checkRestricted(t, &d.Spec.Template.Spec)

	// Services route to the container's named ports.
	for _, s := range []struct {
		svc  string
		port string
		num  int32
	}{{"draingate", "http", 8080}, {"draingate", "webhook", 9443}, {"draingate-metrics", "metrics", 9090}} {
		svc := serviceNamed(t, r, s.svc)
		ss := labels.SelectorFromSet(svc.Spec.Selector)
		if !ss.Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select the server pods", svc.Name, svc.Spec.Selector)
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Name == s.port && p.Port == s.num && p.TargetPort.String() == s.port
		}) {
			t.Errorf("Service %s ports %+v, want %s %d → %s", svc.Name, svc.Spec.Ports, s.port, s.num, s.port)
		}
	}
	// The agent's default URL names this Service and port.
	if !strings.HasPrefix(prestop.DefaultServer, "http://draingate."+namespace+".svc:8080") {
		t.Errorf("agent default %s does not match Service draingate:8080 in %s", prestop.DefaultServer, namespace)
	}

	pdb := one[*policyv1.PodDisruptionBudget](t, r)
	ps, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || !ps.Matches(podLabels) {
		t.Errorf("PDB minAvailable %v selector %s", pdb.Spec.MinAvailable, ps)
	}
	if n := len(all[*policyv1.PodDisruptionBudget](mustRender(t, "replicaCount: 1"))); n != 0 {
		t.Errorf("one replica: %d PDBs, want none (it would block every node drain)", n)
	}
	if n := len(all[*policyv1.PodDisruptionBudget](mustRender(t, "podDisruptionBudget: {enabled: false}"))); n != 0 {
		t.Errorf("podDisruptionBudget.enabled false: %d PDBs", n)
	}

	// The NetworkPolicy, when asked for: the wait API from pods (and the
	// CIDRs given), the webhook from its CIDRs, metrics from anywhere.
	if n := len(all[*networkingv1.NetworkPolicy](r)); n != 0 {
		t.Errorf("a NetworkPolicy by default (%d): it needs a CNI that enforces it", n)
	}
	np := one[*networkingv1.NetworkPolicy](t, mustRender(t, "networkPolicy: {enabled: true, waitApiFromCIDRs: [192.168.0.0/16], webhookFromCIDRs: [10.0.0.0/24]}"))
	nps, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if !nps.Matches(podLabels) || len(np.Spec.Ingress) != 3 || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Fatalf("NetworkPolicy %+v", np.Spec)
	}
	byPort := map[string]networkingv1.NetworkPolicyIngressRule{}
	for _, in := range np.Spec.Ingress {
		byPort[in.Ports[0].Port.String()] = in
	}
	if w := byPort["http"]; len(w.From) != 2 || w.From[0].NamespaceSelector == nil || len(w.From[0].NamespaceSelector.MatchLabels) != 0 || w.From[1].IPBlock == nil || w.From[1].IPBlock.CIDR != "192.168.0.0/16" {
		t.Errorf("wait API rule %+v: want every namespace's pods and the CIDR given", w)
	}
	if w := byPort["webhook"]; len(w.From) != 1 || w.From[0].IPBlock == nil || w.From[0].IPBlock.CIDR != "10.0.0.0/24" {
		t.Errorf("webhook rule %+v: want the API server's CIDR", w)
	}
	if m, ok := byPort["metrics"]; !ok || len(m.From) != 0 {
		t.Errorf("metrics rule %+v: want from anywhere", m)
	}

	for _, o := range r.objs {
		m, err := metaOf(o)
		if err != nil {
			t.Fatal(err)
		}
		if m.GetLabels()["app.kubernetes.io/instance"] != release {
			t.Errorf("%T %s has no app.kubernetes.io/instance label", o, m.GetName())
		}
	}
	for _, want := range []string{"kubectl label namespace NAMESPACE draingate.dev/inject=enabled", "get events", "port-forward svc/draingate-metrics 9090"} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt does not say %q:\n%s", want, r.notes)
		}
	}
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	if m, ok := o.(metav1.Object); ok {
		return m, nil
	}
	return nil, fmt.Errorf("%T has no metadata", o)
}

// checkRestricted checks what Pod Security "restricted" asks of a pod, and
// the chart's own additions (read-only root, a fixed non-root UID).
func checkRestricted(t *testing.T, p *corev1.PodSpec) {
	t.Helper()
	if p.HostNetwork || p.HostPID || p.HostIPC {
		t.Errorf("host namespaces: network %v pid %v ipc %v", p.HostNetwork, p.HostPID, p.HostIPC)
	}
	for _, v := range p.Volumes {
		if v.HostPath != nil {
			t.Errorf("hostPath volume %s", v.Name)
		}
	}
	psc := p.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range append(slices.Clone(p.InitContainers), p.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = psc.RunAsNonRoot
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = psc.RunAsUser
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		switch {
		case nonRoot == nil || !*nonRoot:
			t.Errorf("container %s: runAsNonRoot not true", c.Name)
		case uid == nil || *uid != 65532:
			t.Errorf("container %s: runAsUser %v, want 65532", c.Name, uid)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: allowPrivilegeEscalation not false", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s: privileged", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: root filesystem writable", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s: capabilities %+v, want drop ALL and none added", c.Name, sc.Capabilities)
		case seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("container %s: seccompProfile %+v, want RuntimeDefault", c.Name, seccomp)
		}
		for _, port := range c.Ports {
			if port.HostPort != 0 {
				t.Errorf("container %s: hostPort %d", c.Name, port.HostPort)
			}
		}
	}
}

type rule struct {
	kind, role string
	rbacv1.PolicyRule
}

func rulesOf(r *rendered) []rule {
	var out []rule
	for _, cr := range all[*rbacv1.ClusterRole](r) {
		for _, pr := range cr.Rules {
			out = append(out, rule{"ClusterRole", cr.Name, pr})
		}
	}
	for _, ro := range all[*rbacv1.Role](r) {
		for _, pr := range ro.Rules {
			out = append(out, rule{"Role", ro.Name, pr})
		}
	}
	return out
}

// ruleKey is one rule, sorted, as text: "Kind name: groups/resources[names] verbs".
func ruleKey(r rule) string {
	s := func(v []string) string { v = slices.Clone(v); sort.Strings(v); return strings.Join(v, ",") }
	return fmt.Sprintf("%s %s: %s/%s[%s] %s", r.kind, r.role, s(r.APIGroups), s(r.Resources), s(r.ResourceNames), s(r.Verbs))
}

func TestRBAC(t *testing.T) {
	// Each rule only where a feature on by default uses it: the
	// TargetGroupBinding cache with target groups, TokenReviews with the
	// wait API answering pods only; the shared route memory always.
	base := []string{
		"ClusterRole draingate: /pods[] get,list,watch",
		"ClusterRole draingate: /services[] list,watch",
		"ClusterRole draingate: discovery.k8s.io/endpointslices[] list,watch",
		"ClusterRole draingate: /events[] create,patch",
		"Role draingate-memory: coordination.k8s.io/leases[] create,delete,get,list,update,watch",
	}
	withTG := append(slices.Clone(base), "ClusterRole draingate: elbv2.k8s.aws/targetgroupbindings[] list,watch")
	defaults := append(slices.Clone(withTG), "ClusterRole draingate: authentication.k8s.io/tokenreviews[] create")
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"", append(slices.Clone(defaults),
			"ClusterRole draingate-webhook: /namespaces[] list,watch",
			"ClusterRole draingate-webhook: /limitranges[] list,watch",
			"ClusterRole draingate-webhook: admissionregistration.k8s.io/mutatingwebhookconfigurations[draingate] get,update",
			"Role draingate-webhook: /secrets[draingate-webhook-tls] get,update",
		)},
		// cert-manager writes the Secret and the caBundle: the server only reads them.
		{"webhook: {certManager: {enabled: true}}", append(slices.Clone(defaults),
			"ClusterRole draingate-webhook: /namespaces[] list,watch",
			"ClusterRole draingate-webhook: /limitranges[] list,watch",
			"ClusterRole draingate-webhook: admissionregistration.k8s.io/mutatingwebhookconfigurations[draingate] get",
			"Role draingate-webhook: /secrets[draingate-webhook-tls] get",
		)},
		{"webhook: {enabled: false}", defaults},
		{"{webhook: {enabled: false}, targetGroups: false}", append(slices.Clone(base), "ClusterRole draingate: authentication.k8s.io/tokenreviews[] create")},
		{"{webhook: {enabled: false}, waitApiSources: any}", withTG},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := mustRender(t, tc.values)
			var got []string
			for _, ru := range rulesOf(r) {
				got = append(got, ruleKey(ru))
				for _, f := range [][]string{ru.Verbs, ru.Resources, ru.APIGroups, ru.ResourceNames} {
					if slices.Contains(f, "*") {
						t.Errorf("wildcard in %s", ruleKey(ru))
					}
				}
				if slices.Contains(ru.Resources, "secrets") && ru.kind != "Role" {
					t.Errorf("secrets in a %s: %s", ru.kind, ruleKey(ru))
				}
				if len(ru.NonResourceURLs) > 0 {
					t.Errorf("nonResourceURLs in %s", ruleKey(ru))
				}
			}
			sort.Strings(got)
			want := slices.Clone(tc.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("rules:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			for _, ro := range all[*rbacv1.Role](r) {
				if ro.Namespace != namespace {
					t.Errorf("Role %s in namespace %q, want the release namespace", ro.Name, ro.Namespace)
				}
			}
			checkBindings(t, r)
			// Every rule says what its verbs are for.
			const file = "templates/rbac.yaml"
			lines := strings.Split(r.text[file], "\n")
			rules := 0
			for i, l := range lines {
				if strings.HasPrefix(strings.TrimSpace(l), "- apiGroups:") {
					rules++
					if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
						t.Errorf("%s line %d: rule without a comment above it saying what its verbs are for: %s", file, i+1, l)
					}
				}
			}
			if rules != len(tc.want) {
				t.Errorf("%s has %d rules, want %d", file, rules, len(tc.want))
			}
		})
	}
}

// checkBindings: every role is bound, to the server's ServiceAccount, and
// every binding names a role the chart makes.
func checkBindings(t *testing.T, r *rendered) {
	t.Helper()
	d, _ := serverContainer(t, r)
	sa := d.Spec.Template.Spec.ServiceAccountName
	bound := map[string]bool{}
	check := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		bound[ref.Kind+"/"+ref.Name] = true
		if len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" || subjects[0].Name != sa || subjects[0].Namespace != namespace {
			t.Errorf("%s %s binds %+v, want ServiceAccount %s/%s", kind, name, subjects, namespace, sa)
		}
	}
	roles := map[string]bool{}
	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		check("ClusterRoleBinding", b.Name, b.RoleRef, b.Subjects)
		if b.RoleRef.Kind != "ClusterRole" {
			t.Errorf("ClusterRoleBinding %s refers to a %s", b.Name, b.RoleRef.Kind)
		}
	}
	for _, b := range all[*rbacv1.RoleBinding](r) {
		check("RoleBinding", b.Name, b.RoleRef, b.Subjects)
		if b.Namespace != namespace {
			t.Errorf("RoleBinding %s in %q", b.Name, b.Namespace)
		}
	}
	for _, cr := range all[*rbacv1.ClusterRole](r) {
		roles["ClusterRole/"+cr.Name] = true
	}
	for _, ro := range all[*rbacv1.Role](r) {
		roles["Role/"+ro.Name] = true
	}
	for k := range roles {
		if !bound[k] {
			t.Errorf("%s is bound to nobody", k)
		}
	}
	for k := range bound {
		if !roles[k] {
			t.Errorf("a binding refers to %s, which the chart does not make", k)
		}
	}
}

// webhooksMatching says which of the configuration's webhooks the API
// server would call for a pod with podLabels in a namespace with nsLabels.
func webhooksMatching(t *testing.T, cfg *admissionv1.MutatingWebhookConfiguration, ns string, nsLabels, podLabels map[string]string) []string {
	t.Helper()
	nl := labels.Set{"kubernetes.io/metadata.name": ns}
	for k, v := range nsLabels {
		nl[k] = v
	}
	var out []string
	for _, w := range cfg.Webhooks {
		nsel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		osel, err := metav1.LabelSelectorAsSelector(w.ObjectSelector)
		if err != nil {
			t.Fatal(err)
		}
		if nsel.Matches(nl) && osel.Matches(labels.Set(podLabels)) {
			out = append(out, w.Name)
		}
	}
	return out
}

func TestWebhook(t *testing.T) {
	r := mustRender(t, "")
	cfg := one[*admissionv1.MutatingWebhookConfiguration](t, r)
	if cfg.Name != "draingate" {
		t.Errorf("configuration %s, want the full name (the server's --webhook-config)", cfg.Name)
	}
	svc := serviceNamed(t, r, "draingate")
	names := []string{}
	for _, w := range cfg.Webhooks {
		names = append(names, w.Name)
		if len(w.Rules) != 1 {
			t.Errorf("%s: %d rules, want one", w.Name, len(w.Rules))
			continue
		}
		ru := w.Rules[0]
		if !slices.Equal(ru.Operations, []admissionv1.OperationType{admissionv1.Create}) ||
			!slices.Equal(ru.APIGroups, []string{""}) || !slices.Equal(ru.APIVersions, []string{"v1"}) || !slices.Equal(ru.Resources, []string{"pods"}) {
			t.Errorf("%s: rule %+v, want CREATE of core v1 pods only", w.Name, ru)
		}
		if w.SideEffects == nil || *w.SideEffects != admissionv1.SideEffectClassNone {
			t.Errorf("%s: sideEffects %v", w.Name, w.SideEffects)
		}
		if w.TimeoutSeconds == nil || *w.TimeoutSeconds > 10 || *w.TimeoutSeconds != 5 {
			t.Errorf("%s: timeoutSeconds %v, want 5", w.Name, w.TimeoutSeconds)
		}
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Ignore {
			t.Errorf("%s: failurePolicy %v, want Ignore by default", w.Name, w.FailurePolicy)
		}
		if w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionv1.IfNeededReinvocationPolicy {
			t.Errorf("%s: reinvocationPolicy %v", w.Name, w.ReinvocationPolicy)
		}
		if !slices.Equal(w.AdmissionReviewVersions, []string{"v1"}) {
			t.Errorf("%s: admissionReviewVersions %v", w.Name, w.AdmissionReviewVersions)
		}
		if len(w.ClientConfig.CABundle) != 0 || w.ClientConfig.URL != nil {
			t.Errorf("%s: caBundle or URL set; the server keeps caBundle current", w.Name)
		}
		s := w.ClientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != namespace || s.Path == nil || *s.Path != "/mutate-pods" || s.Port == nil ||
			!slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "webhook" && p.Port == *s.Port }) {
			t.Errorf("%s: clientConfig.service %+v, want the Service's webhook port, path /mutate-pods", w.Name, s)
		}
		// Whatever the labels, nothing in the release namespace is sent to either webhook.
		for _, nsLabels := range []map[string]string{nil, {injectKey: "enabled"}, {injectKey: "disabled"}} {
			for _, podLabels := range []map[string]string{nil, {injectKey: "enabled"}, {"app": "web"}} {
				if got := webhooksMatching(t, &admissionv1.MutatingWebhookConfiguration{Webhooks: []admissionv1.MutatingWebhook{w}}, namespace,
					nsLabels, podLabels); len(got) != 0 {
					t.Errorf("%s matches a pod labelled %v in the release namespace labelled %v", w.Name, podLabels, nsLabels)
				}
			}
		}
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"namespace.pods.draingate.dev", "pod.pods.draingate.dev"}) {
		t.Errorf("webhooks %v", names)
	}

	d, _ := serverContainer(t, r)
	for _, tc := range []struct {
		desc          string
		ns            string
		nsLabels, pod map[string]string
		want          int
	}{
		{"opted-in namespace", "shop", map[string]string{injectKey: "enabled"}, map[string]string{"app": "web"}, 1},
		{"opted-in namespace, pod opted in too", "shop", map[string]string{injectKey: "enabled"}, map[string]string{injectKey: "enabled"}, 1},
		{"opted-in namespace, pod opted out", "shop", map[string]string{injectKey: "enabled"}, map[string]string{injectKey: "disabled"}, 0},
		{"opted-in pod", "other", nil, map[string]string{injectKey: "enabled"}, 1},
		{"opted-in pod, namespace opted out", "other", map[string]string{injectKey: "disabled"}, map[string]string{injectKey: "enabled"}, 1},
		{"nobody opted in", "other", nil, map[string]string{"app": "web"}, 0},
		{"the gate server's own pod in an opted-in namespace", "shop", map[string]string{injectKey: "enabled"}, d.Spec.Template.Labels, 0},
		{"the release namespace, opted in", namespace, map[string]string{injectKey: "enabled"}, map[string]string{"app": "web"}, 0},
	} {
		if got := webhooksMatching(t, cfg, tc.ns, tc.nsLabels, tc.pod); len(got) != tc.want {
			t.Errorf("%s: matched by %v, want %d webhook(s)", tc.desc, got, tc.want)
		}
	}

	// failurePolicy: Fail is allowed, anything else fails the render naming the value.
	cfg = one[*admissionv1.MutatingWebhookConfiguration](t, mustRender(t, "webhook: {failurePolicy: Fail}"))
	for _, w := range cfg.Webhooks {
		if *w.FailurePolicy != admissionv1.Fail {
			t.Errorf("%s: failurePolicy %s, want Fail", w.Name, *w.FailurePolicy)
		}
	}
	for values, want := range map[string][]string{
		"webhook: {failurePolicy: Bogus}":            {"webhook.failurePolicy", "Bogus"},
		"webhook: {failurePolicy: ignore}":           {"webhook.failurePolicy", "ignore"},
		"webhook: {timeoutSeconds: 30}":              {"webhook.timeoutSeconds", "30"},
		"logFormat: xml":                             {"logFormat", "xml"},
		"aws: {rate: 0}":                             {"aws.rate", "0"},
		"aws: {burst: 0}":                            {"aws.burst", "0"},
		"metrics: {enabled: false, profiling: true}": {"metrics.profiling", "metrics.enabled"},
	} {
		_, err := renderChart(t, release, values)
		if err == nil {
			t.Errorf("%s: rendered, want an error", values)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", values, err, w)
			}
		}
	}

	// Disabled: no configuration, no webhook port or flags, no Secret access.
	r = mustRender(t, "webhook: {enabled: false}")
	if n := len(all[*admissionv1.MutatingWebhookConfiguration](r)); n != 0 {
		t.Errorf("webhook disabled: %d configurations", n)
	}
	_, c := serverContainer(t, r)
	flags := flagsOf(t, c.Args)
	if v, ok := flags["webhook-listen"]; !ok || v != "" {
		t.Errorf("webhook disabled: --webhook-listen=%q (given %v), want it given empty", v, ok)
	}
	for f := range flags {
		if f != "webhook-listen" && (strings.HasPrefix(f, "webhook-") || strings.HasPrefix(f, "agent-") || strings.HasPrefix(f, "inject-")) {
			t.Errorf("webhook disabled: --%s still given", f)
		}
	}
	if slices.ContainsFunc(serviceNamed(t, r, "draingate").Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "webhook" }) ||
		slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }) {
		t.Errorf("webhook disabled: webhook port still exposed")
	}
}

func TestCertManager(t *testing.T) {
	r := mustRender(t, "webhook: {certManager: {enabled: true}}")
	cfg := one[*admissionv1.MutatingWebhookConfiguration](t, r)
	_, c := serverContainer(t, r)
	secret := flagsOf(t, c.Args)["webhook-secret"]
	certs := unstructuredOf(r, "cert-manager.io/v1", "Certificate")
	if len(certs) != 1 {
		t.Fatalf("%d Certificates, want 1", len(certs))
	}
	cert := certs[0]
	if want := cert.GetNamespace() + "/" + cert.GetName(); cfg.Annotations["cert-manager.io/inject-ca-from"] != want || cert.GetNamespace() != namespace {
		t.Errorf("inject-ca-from %q, want %q in %s", cfg.Annotations["cert-manager.io/inject-ca-from"], want, namespace)
	}
	if s, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); s != secret || s == "" {
		t.Errorf("Certificate secretName %q, server reads --webhook-secret=%s", s, secret)
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if svcDNS := cfg.Webhooks[0].ClientConfig.Service.Name + "." + namespace + ".svc"; !slices.Contains(dns, svcDNS) {
		t.Errorf("Certificate dnsNames %v lack %s, the name the API server dials", dns, svcDNS)
	}
	ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	issuers := unstructuredOf(r, "cert-manager.io/v1", "Issuer")
	if len(issuers) != 1 || ref["kind"] != "Issuer" || ref["name"] != issuers[0].GetName() {
		t.Errorf("issuerRef %v, issuers %d: want the chart's own Issuer", ref, len(issuers))
	} else if _, ok, _ := unstructured.NestedMap(issuers[0].Object, "spec", "selfSigned"); !ok {
		t.Errorf("Issuer %s is not self-signed", issuers[0].GetName())
	}

	r = mustRender(t, "webhook: {certManager: {enabled: true, issuerRef: {name: corp-ca, kind: ClusterIssuer}}}")
	if n := len(unstructuredOf(r, "cert-manager.io/v1", "Issuer")); n != 0 {
		t.Errorf("issuerRef given: %d Issuers rendered", n)
	}
	ref, _, _ = unstructured.NestedStringMap(unstructuredOf(r, "cert-manager.io/v1", "Certificate")[0].Object, "spec", "issuerRef")
	if ref["name"] != "corp-ca" || ref["kind"] != "ClusterIssuer" {
		t.Errorf("issuerRef %v", ref)
	}

	r = mustRender(t, "")
	if n := len(all[*unstructured.Unstructured](r)); n != 0 {
		t.Errorf("defaults render %d objects of kinds outside the core scheme, want none", n)
	}
	if _, ok := one[*admissionv1.MutatingWebhookConfiguration](t, r).Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Errorf("inject-ca-from without cert-manager")
	}
}

func TestMetrics(t *testing.T) {
	r := mustRender(t, "metrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}")
	sms := unstructuredOf(r, "monitoring.coreos.com/v1", "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	sm := sms[0]
	if sm.GetLabels()["release"] != "prom" || sm.GetNamespace() != namespace {
		t.Errorf("ServiceMonitor labels %v namespace %s", sm.GetLabels(), sm.GetNamespace())
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	var matched []string
	for _, s := range all[*corev1.Service](r) {
		if labels.SelectorFromSet(sel).Matches(labels.Set(s.Labels)) {
			matched = append(matched, s.Name)
		}
	}
	if !slices.Equal(matched, []string{"draingate-metrics"}) {
		t.Errorf("ServiceMonitor selects Services %v, want only draingate-metrics", matched)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" {
		t.Errorf("endpoints %v", eps)
	}

	r = mustRender(t, "metrics: {enabled: false, serviceMonitor: {enabled: true}}")
	for _, s := range all[*corev1.Service](r) {
		if s.Name == "draingate-metrics" {
			t.Errorf("metrics disabled: metrics Service still rendered")
		}
	}
	if len(unstructuredOf(r, "monitoring.coreos.com/v1", "ServiceMonitor")) != 0 {
		t.Errorf("metrics disabled: ServiceMonitor still rendered")
	}
}

// TestNames: another release name and namespace move every reference along.
func TestNames(t *testing.T) {
	r, err := renderChart(t, "edge", "")
	if err != nil {
		t.Fatal(err)
	}
	d, c := serverContainer(t, r)
	if d.Name != "edge-draingate" {
		t.Errorf("Deployment %s, want edge-draingate", d.Name)
	}
	f := flagsOf(t, c.Args)
	if f["agent-server"] != "http://edge-draingate.draingate-system.svc:8080" || f["webhook-config"] != "edge-draingate" {
		t.Errorf("flags %v", f)
	}
	cfg := one[*admissionv1.MutatingWebhookConfiguration](t, r)
	if cfg.Name != "edge-draingate" || cfg.Webhooks[0].ClientConfig.Service.Name != "edge-draingate" {
		t.Errorf("configuration %s → service %s", cfg.Name, cfg.Webhooks[0].ClientConfig.Service.Name)
	}
	if !strings.Contains(r.notes, "--server") {
		t.Errorf("NOTES do not warn that hand-configured agents need --server:\n%s", r.notes)
	}
	for _, ru := range rulesOf(r) {
		if slices.Contains(ru.Resources, "mutatingwebhookconfigurations") && !slices.Equal(ru.ResourceNames, []string{"edge-draingate"}) {
			t.Errorf("rule %s", ruleKey(ru))
		}
		if slices.Contains(ru.Resources, "secrets") && len(ru.ResourceNames) > 0 && !slices.Equal(ru.ResourceNames, []string{f["webhook-secret"]}) {
			t.Errorf("rule %s, server uses --webhook-secret=%s", ruleKey(ru), f["webhook-secret"])
		}
	}
}

// leaves flattens values.yaml into dotted paths of its leaves (scalars,
// lists, empty maps).
func leaves(prefix string, v any, out map[string]any) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		out[prefix] = v
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		leaves(p, sub, out)
	}
}

func valuesLeaves(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	leaves("", v, out)
	return out
}

// TestREADMEListsEveryValue: the chart README's table has a row
// | `path` | `default` | … for every leaf of values.yaml, default in JSON,
// and no row for a value that is gone.
func TestREADMEListsEveryValue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	row := regexp.MustCompile("^\\| `([^`]+)` \\| `([^`]*)` \\|")
	for _, l := range strings.Split(string(b), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			rows[m[1]] = m[2]
		}
	}
	vals := valuesLeaves(t)
	if len(vals) < 40 {
		t.Fatalf("only %d values found in values.yaml", len(vals))
	}
	for path, v := range vals {
		js, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		def, ok := rows[path]
		switch {
		case !ok:
			t.Errorf("README.md has no row for %s (default %s)", path, js)
		case def != string(js):
			t.Errorf("README.md says %s defaults to %s, values.yaml says %s", path, def, js)
		}
	}
	for path := range rows {
		if _, ok := vals[path]; !ok {
			t.Errorf("README.md lists %s, which values.yaml does not have", path)
		}
	}

	// The IAM policy in the README: the two read-only ELBv2 actions the
	// server needs, on every resource, and the optional ones that list the
	// load balancers' nodes, and nothing else.
	block := regexp.MustCompile("(?s)```json\n(.*?)```").FindSubmatch(b)
	if block == nil {
		t.Fatal("README.md has no ```json block with the IAM policy")
	}
	var policy struct {
		Version   string
		Statement []struct {
			Sid      string
			Effect   string
			Action   []string
			Resource string
		}
	}
	if err := json.Unmarshal(block[1], &policy); err != nil {
		t.Fatalf("IAM policy: %v", err)
	}
	// Exactly the calls internal/aws/elbv2's API and EC2API interfaces
	// make: the required ones, then the optional ones, named so.
	want := [][]string{
		{"elasticloadbalancing:DescribeTargetGroups", "elasticloadbalancing:DescribeTargetHealth"},
		{"ec2:DescribeNetworkInterfaces", "elasticloadbalancing:DescribeLoadBalancerAttributes", "elasticloadbalancing:DescribeTargetGroupAttributes"},
	}
	if len(policy.Statement) != len(want) || !strings.Contains(policy.Statement[1].Sid, "Optional") {
		t.Errorf("IAM policy %+v, want %d statements, the second one optional", policy, len(want))
	} else {
		for i, s := range policy.Statement {
			if s.Effect != "Allow" || s.Resource != "*" || !slices.Equal(slices.Sorted(slices.Values(s.Action)), want[i]) {
				t.Errorf("IAM policy statement %d %+v, want Allow %v on *", i, s, want[i])
			}
		}
	}
	if !bytes.Contains(b, []byte("ec2:DescribeNetworkInterfaces` lists each load balancer's")) {
		t.Errorf("README.md does not say what the optional statement is for")
	}
	if !bytes.Contains(b, []byte("eks.amazonaws.com/role-arn")) {
		t.Errorf("README.md has no IRSA annotation example")
	}
}

// TestValuesCommented: every value in values.yaml has a comment beside it.
func TestValuesCommented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, n *yaml.Node)
	count := 0
	walk = func(prefix string, n *yaml.Node) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := strings.TrimPrefix(prefix+"."+k.Value, ".")
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				walk(path, v)
				continue
			}
			count++
			if strings.TrimSpace(k.HeadComment+k.LineComment+v.LineComment) == "" {
				t.Errorf("values.yaml: %s (line %d) has no comment", path, k.Line)
			}
		}
	}
	walk("", doc.Content[0])
	if count < 40 {
		t.Errorf("walked only %d values", count)
	}
}

// TestSchemaRefusesBadValues: values.schema.json refuses, before any
// template runs, a misspelt key, a value of the wrong type, a duration
// without its unit, a chance out of range and a choice not offered, each
// with a message naming the value's place; good values render (every
// other test renders them).
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct{ values, kind, place string }{
		{"replicas: 3", "a misspelt key", "replicas"},
		{"trafficEvidence: {enabld: false}", "a misspelt nested key", "enabld"},
		{"replicaCount: two", "the wrong type", "/replicaCount"},
		{"networkPolicy: {waitApiFromCIDRs: 10.0.0.0/8}", "a string for a list", "/networkPolicy/waitApiFromCIDRs"},
		{"tails: {alb: 20}", "a duration without its unit", "/tails/alb"},
		{"agent: {maxWait: 90 seconds}", "a duration Go cannot read", "/agent/maxWait"},
		{"trafficEvidence: {epsilon: 0.5}", "a chance the server refuses (at most 0.01)", "/trafficEvidence/epsilon"},
		{"logLevel: verbose", "a log level not offered", "/logLevel"},
		{"waitApiSources: everyone", "a choice not offered", "/waitApiSources"},
		{"ports: {http: 70000}", "a port out of range", "/ports/http"},
	} {
		_, err := renderChart(t, release, c.values)
		if err == nil {
			t.Errorf("%s (%s): rendered, want an error", c.values, c.kind)
			continue
		}
		if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), c.place) {
			t.Errorf("%s (%s): error %q does not come from the schema naming %q", c.values, c.kind, err, c.place)
		}
	}
	// Quoted numbers and durations as the lab scales them still pass.
	for _, good := range []string{"aws: {rate: '0.25'}", "tails: {alb: 8s, nlb: 2m0s}", "maxWait: 12.5s", "trafficEvidence: {epsilon: 1e-3}"} {
		if _, err := renderChart(t, release, good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
}

// selects says whether the label selector matches labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// hostNetwork puts the server on its node's network, with the DNS policy
// that still resolves cluster names, and its ports where ports.* say
// (the node's then); off by default.
func TestHostNetwork(t *testing.T) {
	d, _ := serverContainer(t, mustRender(t, ""))
	if d.Spec.Template.Spec.HostNetwork {
		t.Error("hostNetwork on by default")
	}
	d, c := serverContainer(t, mustRender(t, "hostNetwork: true\nports: {http: 18080, metrics: 19090, webhook: 19443}"))
	if s := d.Spec.Template.Spec; !s.HostNetwork || s.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q; want true and %q", s.HostNetwork, s.DNSPolicy, corev1.DNSClusterFirstWithHostNet)
	}
	flags := flagsOf(t, c.Args)
	if flags["listen"] != ":18080" || flags["metrics-listen"] != ":19090" || flags["webhook-listen"] != ":19443" {
		t.Errorf("listen %q, metrics %q, webhook %q; want the ports given", flags["listen"], flags["metrics-listen"], flags["webhook-listen"])
	}
}

// A digest pins an image by content and wins over its tag, for the server
// and for the agent injected into every opted-in pod.
func TestImageDigests(t *testing.T) {
	const sum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	_, c := serverContainer(t, mustRender(t, "image: {repository: registry.example/draingate, tag: v2, digest: "+sum+"}\n"+
		"agent: {image: {repository: registry.example/dg-agent, tag: v2, digest: "+sum+"}}"))
	if c.Image != "registry.example/draingate@"+sum {
		t.Errorf("server image %s, want it by digest", c.Image)
	}
	if got := flagsOf(t, c.Args)["agent-image"]; got != "registry.example/dg-agent@"+sum {
		t.Errorf("--agent-image=%s, want it by digest", got)
	}
	if _, err := renderChart(t, release, "agent: {image: {digest: latest}}"); err == nil || !strings.Contains(err.Error(), "/agent/image/digest") {
		t.Errorf("a digest that is no sha256 sum: %v, want the schema to refuse it", err)
	}
}
