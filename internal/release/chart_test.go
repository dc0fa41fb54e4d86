package release

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"draingate.dev/draingate/internal/chart"
	"draingate.dev/draingate/internal/image"
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
	checkPackage(t, ch, []string{"# image.repository: the gate server image", "repository: ghcr.io/acme/draingate-prestop\n"},
		[]string{`image: "ghcr.io/acme/draingate:v1.2.3"`, `--agent-image=ghcr.io/acme/draingate-prestop:v1.2.3`})
	if _, err := Chart(Options{Version: "v1", Out: t.TempDir()}, "", nil); err != nil {
		t.Errorf("without an image prefix: %v", err)
	}
}

// make chart after make images pins both images by the digests of the
// layouts it built (what a push of them publishes), keeping values.yaml's
// comments; without the layouts, by tag only.
func TestChartPinsDigests(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := LayoutDigests(dir, "v1.2.3"); ok || err != nil {
		t.Fatalf("no layouts: ok %v, %v; want not ok and no error", ok, err)
	}
	// What make images leaves: per image an OCI layout of its index, named
	// by the version.
	want := map[string]string{}
	for _, name := range []string{"draingate", "draingate-prestop"} {
		idx, err := random.Index(64, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := image.WriteLayout(filepath.Join(dir, name), "v1.2.3", idx); err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		want[name] = d.String()
	}
	if _, _, err := LayoutDigests(dir, "v1.3.0"); err == nil || !strings.Contains(err.Error(), `built for version "v1.2.3", not "v1.3.0"`) {
		t.Errorf("layouts of another version: %v, want an error saying so", err)
	}
	got, ok, err := LayoutDigests(dir, "v1.2.3")
	if err != nil || !ok || got["draingate"] != want["draingate"] || got["draingate-prestop"] != want["draingate-prestop"] {
		t.Fatalf("LayoutDigests = %v, %v, %v; want %v", got, ok, err, want)
	}
	path, err := Chart(Options{Version: "v1.2.3", Out: t.TempDir(), Created: time.Unix(1764547200, 0).UTC()}, "ghcr.io/acme", got)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	checkPackage(t, ch, []string{`  digest: "` + want["draingate"] + "\"\n", `    digest: "` + want["draingate-prestop"] + "\"\n", "# image.digest: sha256:"},
		[]string{`image: "ghcr.io/acme/draingate@` + want["draingate"] + `"`, `--agent-image=ghcr.io/acme/draingate-prestop@` + want["draingate-prestop"]})
}

// checkPackage checks a packaged chart: its values.yaml holds each of
// values (comments kept), and its rendered Deployment each of deployment.
func checkPackage(t *testing.T, ch *chartv2.Chart, values, deployment []string) {
	t.Helper()
	for _, f := range ch.Raw {
		if f.Name != "values.yaml" {
			continue
		}
		for _, w := range values {
			if !strings.Contains(string(f.Data), w) {
				t.Errorf("values.yaml lacks %q:\n%s", w, f.Data)
			}
		}
	}
	files, err := chart.RenderChart(ch, "draingate-system", "draingate", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	dep := files["draingate/templates/deployment.yaml"]
	for _, w := range deployment {
		if !strings.Contains(dep, w) {
			t.Errorf("rendered deployment lacks %s:\n%s", w, dep)
		}
	}
}
