package image

import (
	"archive/tar"
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
