package image

import (
	"archive/tar"
	"bytes"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestWriteTarballRoundTrip(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "img.tar")
	spec := Spec{
		Ref:        "draingate.local/test:1",
		Files:      []File{{Path: "/bin/app", Data: []byte("#!binary"), Mode: 0o755}, {Path: "/etc/app/config", Data: []byte("k=v"), Mode: 0o644}},
		Entrypoint: []string{"/bin/app"},
		User:       "65532:65532",
	}
	if err := WriteTarball(spec, dst); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(spec.Ref)
	img, err := tarball.ImageFromPath(dst, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Config.Entrypoint[0] != "/bin/app" || cf.Config.User != "65532:65532" {
		t.Errorf("config: os=%s entrypoint=%v user=%s", cf.OS, cf.Config.Entrypoint, cf.Config.User)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, _ := layers[0].Uncompressed()
	defer rc.Close()
	got := map[string]string{}
	modes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		io.Copy(&b, tr)
		got[h.Name] = b.String()
		modes[h.Name] = h.Mode
	}
	if got["bin/app"] != "#!binary" || got["etc/app/config"] != "k=v" {
		t.Errorf("layer files: %v", got)
	}
	if modes["bin/app"] != 0o755 || modes["etc/app/config"] != 0o644 {
		t.Errorf("modes: %v", modes)
	}
	if _, ok := got["etc/app/"]; !ok {
		t.Errorf("parent folder etc/app/ missing: %v", got)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	spec := Spec{Ref: "draingate.local/test:1", Files: []File{{Path: "/bin/app", Data: []byte("x")}}}
	a, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Build(spec)
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("same inputs, digests %s and %s", da, db)
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	if _, err := Build(Spec{Ref: "x"}); err == nil {
		t.Error("no files: want an error")
	}
	if _, err := Build(Spec{Ref: "x", Files: []File{{Path: "relative", Data: []byte("x")}}}); err == nil {
		t.Error("relative path: want an error")
	}
	if err := WriteTarball(Spec{Ref: "UPPER:bad:ref", Files: []File{{Path: "/a", Data: []byte("x")}}}, filepath.Join(t.TempDir(), "x.tar")); err == nil {
		t.Error("bad reference: want an error")
	}
}

// An index of two platforms written as an OCI layout reads back with each
// platform's image, OCI media types, the labels and the creation time
// stamped on the config and on every file; the same inputs give the same
// index digest.
func TestIndexLayoutRoundTrip(t *testing.T) {
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	specs := func() []Spec {
		var out []Spec
		for _, arch := range []string{"amd64", "arm64"} {
			out = append(out, Spec{Ref: "draingate.local/x:1", Arch: arch, Created: created,
				Files:  []File{{Path: "/bin/app", Data: []byte("app for " + arch)}},
				Labels: map[string]string{"org.opencontainers.image.version": "v1.2.3"}, User: "65532:65532"})
		}
		return out
	}
	idx, err := Index(specs(), map[string]string{"org.opencontainers.image.version": "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Index(specs(), map[string]string{"org.opencontainers.image.version": "v1.2.3"})
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("same inputs, index digests %s and %s", d1, d2)
	}
	dir := filepath.Join(t.TempDir(), "x")
	if err := WriteLayout(dir, "v1.2.3", idx); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, "v1.2.3", idx); err != nil {
		t.Fatalf("writing over an existing layout: %v", err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := top.IndexManifest()
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != d1 || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1.2.3" {
		t.Fatalf("layout index.json: %+v; want the index %s named v1.2.3", tm.Manifests, d1)
	}
	read, err := top.ImageIndex(d1)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := read.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s", mt)
	}
	im, _ := read.IndexManifest()
	if len(im.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(im.Manifests))
	}
	for i, m := range im.Manifests {
		want := []string{"amd64", "arm64"}[i]
		if m.Platform == nil || m.Platform.Architecture != want || m.Platform.OS != "linux" {
			t.Errorf("manifest %d platform %+v, want linux/%s", i, m.Platform, want)
		}
		img, err := read.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
			t.Errorf("image media type %s", mt)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != want || !cf.Created.Time.Equal(created) || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
			t.Errorf("config: arch %s created %s labels %v", cf.Architecture, cf.Created, cf.Config.Labels)
		}
		layers, _ := img.Layers()
		if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type %s", mt)
		}
		rc, _ := layers[0].Uncompressed()
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if !h.ModTime.Equal(created) {
				t.Errorf("%s stamped %s, want %s", h.Name, h.ModTime, created)
			}
		}
		rc.Close()
	}
}
