// Package image builds container images offline: an empty base plus one layer
// of the project's own static files, written as a docker-archive tarball that
// `ctr images import` (and `docker load`) accept. No registry, no daemon.
//
// It must never fetch anything: every byte of an image comes from the caller.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one regular file of the image's single layer.
type File struct {
	// Path inside the image, absolute ("/bin/app").
	Path string
	// Mode is the permission bits; 0 means 0755 for files.
	Mode int64
	// Data is the content. If nil, Source is read instead.
	Data []byte
	// Source is a file on the host to copy.
	Source string
}

// Spec describes an image made of one layer.
type Spec struct {
	// Ref is the image's name, fully qualified (e.g. "draingate.local/pause:1")
	// so that the CRI does not rewrite it to docker.io.
	Ref        string
	Files      []File
	Entrypoint []string
	Cmd        []string
	// User is the default user, numeric ("65532:65532") so that images
	// without /etc/passwd still satisfy runAsNonRoot.
	User string
	Env  []string
}

// epoch keeps layers byte-identical across builds of the same inputs.
var epoch = time.Unix(0, 0).UTC()

// Build returns the image for spec.
func Build(spec Spec) (v1.Image, error) {
	if len(spec.Files) == 0 {
		return nil, fmt.Errorf("image %s: no files", spec.Ref)
	}
	layerTar, err := layer(spec.Files)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.User = spec.User
	cf.Config.Env = spec.Env
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	return img, nil
}

// WriteTarball builds spec and writes it as a docker-archive tarball at dst.
// The file is written under a temporary name and renamed, so a failed build
// never leaves a half-written tarball behind.
func WriteTarball(spec Spec, dst string) error {
	ref, err := name.ParseReference(spec.Ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", spec.Ref, err)
	}
	img, err := Build(spec)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write image %s: %w", spec.Ref, err)
	}
	return os.Rename(tmp, dst)
}

// layer makes a tar stream of files plus the parent directories they need.
func layer(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("file path %q is not absolute", f.Path)
		}
		data := f.Data
		if data == nil {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return nil, err
			}
			data = b
		}
		for _, d := range parents(f.Path) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: mode, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents returns the directories above p, outermost first, without the
// leading slash ("/a/b/c" → "a", "a/b").
func parents(p string) []string {
	var out []string
	d := path.Dir(p)
	for d != "/" && d != "." {
		out = append([]string{strings.TrimPrefix(d, "/")}, out...)
		d = path.Dir(d)
	}
	return out
}
