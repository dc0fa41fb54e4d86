package release

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"draingate.dev/draingate/internal/chart"
)

func TestChartVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":           "1.2.3",
		"1.2.3-rc.1":       "1.2.3-rc.1",
		"v0.3.0-4-gabcdef": "0.3.0-4-gabcdef",
		"30dd271-dirty":    "0.0.0-30dd271-dirty",
		"dev":              "0.0.0-dev",
		"a/b c":            "0.0.0-a-b-c",
	} {
		if got := ChartVersion(in); got != want {
			t.Errorf("ChartVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// The packaged chart carries the release's version as appVersion (so the
// images' default tag is the release's) and, with an image prefix, the
// pushed images as its defaults; values.yaml keeps its comments; the same
// inputs give the same bytes.
func TestChartPackage(t *testing.T) {
	o := Options{Version: "v1.2.3", Created: time.Unix(1764547200, 0).UTC()}
	pack := func() (string, []byte) {
		o.Out = t.TempDir()
		path, err := Chart(o, "ghcr.io/acme/", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return path, b
	}
	path, first := pack()
	_, second := pack()
	if filepath.Base(path) != "draingate-1.2.3.tgz" {
		t.Errorf("package %s, want draingate-1.2.3.tgz", filepath.Base(path))
	}
	if !bytes.Equal(first, second) {
		t.Error("two packages of the same inputs differ")
	}
	ch, err := loader.LoadArchive(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3" || ch.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("Chart.yaml version %q appVersion %q", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	for _, f := range ch.Raw {
		if f.Name == "values.yaml" && (!strings.Contains(string(f.Data), "# image.repository: the gate server image") ||
			!strings.Contains(string(f.Data), "repository: ghcr.io/acme/draingate-prestop\n")) {
			t.Errorf("values.yaml lost its comments or kept the local images:\n%s", f.Data)
		}
	}
	files, err := chart.RenderChart(ch, "draingate-system", "draingate", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	dep := files["draingate/templates/deployment.yaml"]
	for _, want := range []string{`image: "ghcr.io/acme/draingate:v1.2.3"`, `--agent-image=ghcr.io/acme/draingate-prestop:v1.2.3`} {
		if !strings.Contains(dep, want) {
			t.Errorf("rendered deployment lacks %s:\n%s", want, dep)
		}
	}
	if _, err := Chart(Options{Version: "v1", Out: t.TempDir()}, "", nil); err != nil {
		t.Errorf("without an image prefix: %v", err)
	}
}

// make chart after make images pins both images by the digests of the
// layouts it built (what a push of them publishes), keeping values.yaml's
// comments; without the layouts, by tag only.
func TestChartPinsDigests(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := LayoutDigests(dir); ok || err != nil {
		t.Fatalf("no layouts: ok %v, %v; want not ok and no error", ok, err)
	}
	// What make images leaves: per image an OCI layout whose index.json
	// lists its one image index.
	want := map[string]string{}
	for i, name := range []string{"draingate", "draingate-prestop"} {
		want[name] = "sha256:" + strings.Repeat(string(rune('a'+i)), 64)
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		index := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","size":1,"digest":"` +
			want[name] + `","annotations":{"org.opencontainers.image.ref.name":"v1.2.3"}}]}`
		if err := os.WriteFile(filepath.Join(dir, name, "index.json"), []byte(index), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := LayoutDigests(dir)
	if err != nil || !ok || got["draingate"] != want["draingate"] || got["draingate-prestop"] != want["draingate-prestop"] {
		t.Fatalf("LayoutDigests = %v, %v, %v; want %v", got, ok, err, want)
	}
	path, err := Chart(Options{Version: "v1.2.3", Out: t.TempDir(), Created: time.Unix(1764547200, 0).UTC()}, "ghcr.io/acme", got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ch.Raw {
		if f.Name == "values.yaml" && (!strings.Contains(string(f.Data), "  digest: \""+want["draingate"]+"\"\n") ||
			!strings.Contains(string(f.Data), "    digest: \""+want["draingate-prestop"]+"\"\n") ||
			!strings.Contains(string(f.Data), "# image.digest: sha256:")) {
			t.Errorf("values.yaml does not pin the digests or lost its comments:\n%s", f.Data)
		}
	}
	files, err := chart.RenderChart(ch, "draingate-system", "draingate", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	dep := files["draingate/templates/deployment.yaml"]
	for _, w := range []string{`image: "ghcr.io/acme/draingate@` + want["draingate"] + `"`, `--agent-image=ghcr.io/acme/draingate-prestop@` + want["draingate-prestop"]} {
		if !strings.Contains(dep, w) {
			t.Errorf("rendered deployment lacks %s", w)
		}
	}
}
