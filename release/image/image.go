// Package image builds container images offline: an empty base plus one layer
// of the project's own static files, written as a docker-archive tarball that
// `ctr images import` (and `docker load`) accept, or as a multi-platform OCI
// image index in an OCI layout (see WriteLayout). No registry, no daemon.
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
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
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
	// Arch is the image's architecture (GOARCH spelling); "" means amd64.
	// The OS is always linux.
	Arch string
	// Labels go into the image's config (OCI annotations such as
	// org.opencontainers.image.version).
	Labels map[string]string
	// Created is the time stamped on the config and on every file; zero
	// means the Unix epoch. The same Created and inputs give the same
	// digest.
	Created time.Time
	// OCI gives the image OCI media types (for an OCI layout or a
	// registry) instead of Docker's (for a docker-archive tarball).
	OCI bool
}

// epoch keeps layers byte-identical across builds of the same inputs.
var epoch = time.Unix(0, 0).UTC()

func (s Spec) created() time.Time {
	if s.Created.IsZero() {
		return epoch
	}
	return s.Created.UTC()
}

func (s Spec) arch() string {
	if s.Arch == "" {
		return "amd64"
	}
	return s.Arch
}

// Build returns the image for spec.
func Build(spec Spec) (v1.Image, error) {
	if len(spec.Files) == 0 {
		return nil, fmt.Errorf("image %s: no files", spec.Ref)
	}
	layerTar, err := layer(spec.Files, spec.created())
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	var opts []tarball.LayerOption
	base := empty.Image
	if spec.OCI {
		opts = append(opts, tarball.WithMediaType(types.OCILayer))
		base = mutate.MediaType(mutate.ConfigMediaType(base, types.OCIConfigJSON), types.OCIManifestSchema1)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", spec.Ref, err)
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", spec.arch()
	cf.Created = v1.Time{Time: spec.created()}
	cf.Config.Labels = spec.Labels
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

// Index bundles images built from specs, one per platform, into an OCI
// image index. annotations go on the index itself.
func Index(specs []Spec, annotations map[string]string) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, spec := range specs {
		spec.OCI = true
		img, err := Build(spec)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: "linux", Architecture: spec.arch()},
		}})
	}
	if len(adds) == 0 {
		return nil, fmt.Errorf("image index: no images")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}

// WriteLayout writes idx as an OCI image layout in dir (created afresh:
// an existing dir is replaced), its index.json naming it refName
// (org.opencontainers.image.ref.name). The layout is written beside dir
// and renamed into place, so a failed write leaves no half layout.
func WriteLayout(dir, refName string, idx v1.ImageIndex) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err == nil {
		err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
	}
	if err == nil {
		err = os.RemoveAll(dir)
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("write OCI layout %s: %w", dir, err)
	}
	return nil
}

// layer makes a tar stream of files plus the parent directories they
// need, every entry stamped with mtime.
func layer(files []File, mtime time.Time) ([]byte, error) {
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
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, err
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: mode, Size: int64(len(data)), ModTime: mtime}
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
