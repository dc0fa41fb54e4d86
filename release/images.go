// Package release builds what a draingate release ships, offline and
// reproducibly: the draingate and draingate-prestop images for linux/amd64
// and linux/arm64 (static binaries on an empty base, no shell, a non-root
// user, OCI labels), each written as an OCI layout with a CycloneDX SBOM
// beside it, and pushed to a registry on request.
//
// Reproducible: the same source, version and creation time (from
// SOURCE_DATE_EPOCH) give the same image digests. The binaries are built
// with -trimpath, without VCS stamping and with an empty build ID; every
// file and config carries the creation time.
package release

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"draingate.dev/draingate/release/image"
)

// Binaries are the images a release builds: one per command, each holding
// only that command at /bin/<name>, its entrypoint.
var Binaries = []Binary{
	{Name: "draingate", Package: "./cmd/draingate", Description: "draingate gate server and admission webhook"},
	{Name: "draingate-prestop", Package: "./cmd/draingate-prestop", Description: "draingate preStop agent (copied into pods by the injector)"},
}

// Binary is one command shipped as an image.
type Binary struct {
	Name, Package, Description string
}

// DefaultArches are the platforms every image is built for.
var DefaultArches = []string{"amd64", "arm64"}

// NonRoot is the images' user: numeric, so that runAsNonRoot can check it
// without /etc/passwd, and named there for tools that look.
const NonRoot = "65532:65532"

// Options say what to build and where.
type Options struct {
	// Root is the module's root folder (where go.mod is).
	Root string
	// Out is the folder the layouts and SBOMs go to: Out/<name> (an OCI
	// layout) and Out/<name>.cdx.json, their digests to Out/DigestsFile;
	// the binaries stay in Out/bin/<name>-linux-<arch>.
	Out string
	// Version is stamped into the binaries and labels; it is also the
	// layout's ref name and the pushed tag.
	Version string
	// Revision is the source's VCS revision, for the labels.
	Revision string
	// Source is the source repository's URL, for the labels.
	Source string
	// Created is the time stamped on every file and config
	// (SOURCE_DATE_EPOCH).
	Created time.Time
	// Arches default to DefaultArches.
	Arches []string
	// Log receives progress lines; nil means none.
	Log io.Writer
}

// Image is one built image.
type Image struct {
	Name string
	// Layout is the OCI layout's folder, SBOM the CycloneDX file.
	Layout, SBOM string
	// Index is the multi-platform index; Digest its digest.
	Index  v1.ImageIndex
	Digest v1.Hash
	// Sizes are each platform's compressed size (config and layer) in
	// bytes, by arch.
	Sizes map[string]int64
}

// Build builds every Binary for every arch and writes the layouts and
// SBOMs, then the layouts' digests (Out/DigestsFile). A failure leaves no
// half-written layout (see image.WriteLayout) and no digests.
func Build(ctx context.Context, o Options) ([]Image, error) {
	if o.Version == "" {
		return nil, fmt.Errorf("release: no version")
	}
	if len(o.Arches) == 0 {
		o.Arches = DefaultArches
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	bins := filepath.Join(o.Out, "bin")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		return nil, err
	}
	// A failed build leaves no digests of an earlier one.
	if err := os.Remove(filepath.Join(o.Out, DigestsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []Image
	for _, b := range Binaries {
		img, err := o.build(ctx, b, bins)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	if err := RecordDigests(o.Out, o.Version); err != nil {
		return nil, err
	}
	return out, nil
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// build builds b's binaries into bins (kept: the release attaches the
// agent's) and its image: the multi-platform index, written as an OCI
// layout, with its SBOM beside it.
func (o Options) build(ctx context.Context, b Binary, bins string) (Image, error) {
	labels := map[string]string{
		"org.opencontainers.image.title":       b.Name,
		"org.opencontainers.image.description": b.Description,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	var specs []image.Spec
	var sbomFrom string
	for _, arch := range o.Arches {
		bin, err := o.buildBinary(ctx, b, arch, bins)
		if err != nil {
			return Image{}, err
		}
		if sbomFrom == "" {
			sbomFrom = bin
		}
		specs = append(specs, o.spec(b, arch, bin, labels))
	}
	idx, err := image.Index(specs, labels)
	if err != nil {
		return Image{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return Image{}, err
	}
	img := Image{Name: b.Name, Index: idx, Digest: digest,
		Layout: filepath.Join(o.Out, b.Name), SBOM: filepath.Join(o.Out, b.Name+".cdx.json")}
	if img.Sizes, err = platformSizes(idx); err != nil {
		return Image{}, err
	}
	if err := image.WriteLayout(img.Layout, o.Version, idx); err != nil {
		return Image{}, err
	}
	if err := o.writeSBOM(b, digest, sbomFrom, img.SBOM); err != nil {
		return Image{}, err
	}
	return img, nil
}

// buildBinary builds b for linux/arch into bins, logs its size and build
// time, and returns its path.
func (o Options) buildBinary(ctx context.Context, b Binary, arch, bins string) (string, error) {
	bin := filepath.Join(bins, b.Name+"-linux-"+arch)
	start := time.Now()
	if err := o.goBuild(ctx, b.Package, arch, bin); err != nil {
		return "", err
	}
	if st, err := os.Stat(bin); err == nil {
		o.logf("images: built %s for linux/%s (%.1f MiB) in %s", b.Name, arch, float64(st.Size())/(1<<20), time.Since(start).Round(100*time.Millisecond))
	}
	return bin, nil
}

// spec is b's image for linux/arch: the binary bin as /bin/<name> and its
// entrypoint, and the passwd and group files that name the NonRoot user it
// runs as.
func (o Options) spec(b Binary, arch, bin string, labels map[string]string) image.Spec {
	return image.Spec{
		Ref:  b.Name + ":" + o.Version,
		Arch: arch,
		Files: []image.File{
			{Path: "/bin/" + b.Name, Source: bin},
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
			{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		},
		Entrypoint: []string{"/bin/" + b.Name},
		User:       NonRoot,
		Labels:     labels,
		Created:    o.Created,
	}
}

// platformSizes is each platform's compressed size in idx (its config and
// layers), by arch.
func platformSizes(idx v1.ImageIndex) (map[string]int64, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, d := range im.Manifests {
		one, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		m, err := one.Manifest()
		if err != nil {
			return nil, err
		}
		size := m.Config.Size
		for _, l := range m.Layers {
			size += l.Size
		}
		sizes[d.Platform.Architecture] = size
	}
	return sizes, nil
}

// writeSBOM writes at path the CycloneDX SBOM of b's image (digest), its
// components read from the module graph of the binary bin: every arch's
// binary is built from the same modules.
func (o Options) writeSBOM(b Binary, digest v1.Hash, bin, path string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("release: read %s's module graph: %w", b.Name, err)
	}
	sbom, err := cycloneDX(b.Name, o, digest, info)
	if err != nil {
		return err
	}
	return writeFile(path, sbom)
}

// goBuild builds pkg as a static linux/arch binary at dst, reproducibly.
func (o Options) goBuild(ctx context.Context, pkg, arch, dst string) error {
	return o.goBuildFor(ctx, pkg, "linux", arch, dst)
}

// goBuildFor builds pkg as a static goos/arch binary at dst, reproducibly.
func (o Options) goBuildFor(ctx context.Context, pkg, goos, arch, dst string) error {
	ldflags := "-s -w -buildid= -X draingate.dev/draingate/internal/version.Version=" + o.Version
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags="+ldflags, "-o", dst, pkg)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w: %s", pkg, goos, arch, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// writeFile writes data at path through a temporary file and a rename.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
