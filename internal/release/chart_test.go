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
		path, err := Chart(o, "ghcr.io/acme/")
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
	if _, err := Chart(Options{Version: "v1", Out: t.TempDir()}, ""); err != nil {
		t.Errorf("without an image prefix: %v", err)
	}
}
