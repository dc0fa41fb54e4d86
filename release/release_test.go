package release

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Both images, built twice from the same source and SOURCE_DATE_EPOCH,
// have the same digests; each holds its command alone (no shell) for
// linux/amd64 and linux/arm64, runs as a non-root user, carries the OCI
// labels, and the amd64 binary prints the version; each SBOM names the
// modules linked in. Each amd64 image, imported into the project's
// cluster, runs its version command in a pod as its non-root user.
func TestImagesReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four static binaries twice and runs them on the cluster")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	o := Options{Root: root, Version: "v0.0.0-test", Revision: "0123456789abcdef", Source: "https://example.test/draingate",
		Created: time.Unix(1764547200, 0).UTC()}
	build := func() map[string]Image {
		o.Out = t.TempDir()
		start := time.Now()
		imgs, err := Build(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("built %d images in %s", len(imgs), time.Since(start).Round(time.Second))
		m := map[string]Image{}
		for _, img := range imgs {
			m[img.Name] = img
		}
		return m
	}
	first, second := build(), build()
	for _, b := range Binaries {
		a, z := first[b.Name], second[b.Name]
		if a.Digest != z.Digest {
			t.Errorf("%s: digests %s and %s from the same inputs", b.Name, a.Digest, z.Digest)
		}
		sa, _ := os.ReadFile(a.SBOM)
		sz, _ := os.ReadFile(z.SBOM)
		if !bytes.Equal(sa, sz) {
			t.Errorf("%s: the two builds' SBOMs differ", b.Name)
		}
		t.Logf("%s %s, sizes %v", b.Name, a.Digest, a.Sizes)
		if d, err := os.ReadFile(filepath.Join(filepath.Dir(a.Layout), DigestsFile)); err != nil || !strings.Contains(string(d), b.Name+" "+a.Digest.String()+"\n") {
			t.Errorf("%s does not list %s %s (%v):\n%s", DigestsFile, b.Name, a.Digest, err, d)
		}
		checkLayout(t, b, a, o)
		checkSBOM(t, b, sa, a.Digest)
		out := runVersionOnCluster(t, ctx, a)
		if want := b.Name + " " + o.Version; !strings.HasPrefix(out, want) {
			t.Errorf("%s version on the cluster printed %q, want %q…", b.Name, out, want)
		} else {
			t.Logf("on the cluster: %s", out)
		}
	}
}

func checkLayout(t *testing.T, b Binary, img Image, o Options) {
	t.Helper()
	top, err := layout.ImageIndexFromPath(img.Layout)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.ImageIndex(img.Digest)
	if err != nil {
		t.Fatalf("%s: the layout does not hold index %s: %v", b.Name, img.Digest, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	for _, d := range im.Manifests {
		arches = append(arches, d.Platform.Architecture)
		one, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := one.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != NonRoot || cf.Architecture != d.Platform.Architecture || !slices.Equal(cf.Config.Entrypoint, []string{"/bin/" + b.Name}) {
			t.Errorf("%s/%s: user %q arch %s entrypoint %v", b.Name, d.Platform.Architecture, cf.Config.User, cf.Architecture, cf.Config.Entrypoint)
		}
		for k, want := range map[string]string{"org.opencontainers.image.version": o.Version, "org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.source": o.Source, "org.opencontainers.image.created": "2025-12-01T00:00:00Z"} {
			if got := cf.Config.Labels[k]; got != want {
				t.Errorf("%s/%s: label %s = %q, want %q", b.Name, d.Platform.Architecture, k, got, want)
			}
		}
		files := layerFiles(t, one)
		var names []string
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		if want := []string{"bin/", "bin/" + b.Name, "etc/", "etc/group", "etc/passwd"}; !slices.Equal(names, want) {
			t.Errorf("%s/%s: files %v, want %v (the command alone, no shell)", b.Name, d.Platform.Architecture, names, want)
		}
		if d.Platform.Architecture == "amd64" {
			bin := filepath.Join(t.TempDir(), b.Name)
			if err := os.WriteFile(bin, files["bin/"+b.Name], 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), o.Version) {
				t.Errorf("%s version: %v: %s; want %s", b.Name, err, out, o.Version)
			}
		}
	}
	if !slices.Equal(arches, DefaultArches) {
		t.Errorf("%s: platforms %v, want %v", b.Name, arches, DefaultArches)
	}
}

func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
}

func checkSBOM(t *testing.T, b Binary, sbom []byte, digest v1.Hash) {
	t.Helper()
	var bom cdxBOM
	if err := json.Unmarshal(sbom, &bom); err != nil {
		t.Fatalf("%s SBOM: %v", b.Name, err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.5" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") ||
		!strings.Contains(bom.Metadata.Component.PURL, digest.Hex) {
		t.Errorf("%s SBOM header: %+v", b.Name, bom.Metadata)
	}
	names := map[string]bool{}
	for _, c := range bom.Components {
		names[c.Name] = true
	}
	if !names["draingate.dev/draingate"] || !names["stdlib"] {
		t.Errorf("%s SBOM lacks the main module or the standard library: %v", b.Name, names)
	}
	switch b.Name {
	case "draingate":
		for _, m := range []string{"k8s.io/client-go", "github.com/aws/aws-sdk-go-v2", "golang.org/x/crypto/x509roots/fallback"} {
			if !names[m] {
				t.Errorf("draingate SBOM lacks %s", m)
			}
		}
	case "draingate-prestop":
		// The agent is stdlib only.
		if len(bom.Components) != 2 {
			t.Errorf("draingate-prestop SBOM names %d components, want the main module and stdlib: %v", len(bom.Components), names)
		}
	}
}

func TestSourceDate(t *testing.T) {
	ctx := context.Background()
	if got, err := sourceDate(ctx, t.TempDir(), "1764547200"); err != nil || !got.Equal(time.Unix(1764547200, 0)) {
		t.Errorf("sourceDate(1764547200) = %s, %v", got, err)
	}
	if got, err := sourceDate(ctx, t.TempDir(), ""); err != nil || got.Unix() != 0 {
		t.Errorf("no SOURCE_DATE_EPOCH and no git: %s, %v; want the epoch", got, err)
	}
	for _, bad := range []string{"yesterday", "-5", "1.5"} {
		if _, err := sourceDate(ctx, t.TempDir(), bad); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
			t.Errorf("sourceDate(%q): %v; want an error naming SOURCE_DATE_EPOCH", bad, err)
		}
	}
}
