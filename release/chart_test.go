package release

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"

	"draingate.dev/draingate/release/chart"
	"draingate.dev/draingate/release/image"
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
	want := writeLayouts(t, dir, "v1.2.3")
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

// writeLayouts writes in dir what make images leaves: per image an OCI
// layout of its index (random), named by version. It returns the indexes'
// digests by image name.
func writeLayouts(t *testing.T, dir, version string) map[string]string {
	t.Helper()
	digests := map[string]string{}
	for _, name := range []string{"draingate", "draingate-prestop"} {
		idx, err := random.Index(64, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := image.WriteLayout(filepath.Join(dir, name), version, idx); err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[name] = d.String()
	}
	return digests
}

// make images lists the digests of the indexes it wrote (what a push
// publishes) in out/images/digests.txt, one "<name> <digest>" line each,
// for the release workflow to sign and attest; without both layouts of
// the version it writes nothing.
func TestRecordDigests(t *testing.T) {
	dir := t.TempDir()
	if err := RecordDigests(dir, "v1.2.3"); err == nil {
		t.Error("no layouts: no error")
	}
	want := writeLayouts(t, dir, "v1.2.3")
	if err := RecordDigests(dir, "v1.3.0"); err == nil {
		t.Error("layouts of another version: no error")
	}
	if _, err := os.Stat(filepath.Join(dir, DigestsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s written from no or stale layouts (%v)", DigestsFile, err)
	}
	if err := RecordDigests(dir, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, DigestsFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, w := string(b), "draingate "+want["draingate"]+"\ndraingate-prestop "+want["draingate-prestop"]+"\n"; got != w {
		t.Errorf("%s:\n%s\nwant\n%s", DigestsFile, got, w)
	}
}

// make chart PUSH=oci://… pushes the package and records the digest the
// registry holds it by in out/chart-digests.txt ("draingate <digest>"),
// for the release workflow to sign.
func TestPushChartRecordsDigest(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, ChartDigestsFile), []byte("draingate sha256:stale\n"), 0o644)
	path, err := Chart(Options{Version: "v1.2.3", Out: out, Created: time.Unix(1764547200, 0).UTC()}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := PushChart(path, "oci://"+host+"/charts/", registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(host+"/charts/draingate:1.2.3", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(tag)
	if err != nil {
		t.Fatal(err)
	}
	if want := host + "/charts/draingate:1.2.3@" + desc.Digest.String(); ref != want {
		t.Errorf("PushChart = %s, want %s", ref, want)
	}
	b, err := os.ReadFile(filepath.Join(out, ChartDigestsFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "draingate "+desc.Digest.String()+"\n"; got != want {
		t.Errorf("%s: %q, want %q (the registry's)", ChartDigestsFile, got, want)
	}
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
