package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"draingate.dev/draingate/release/image"
)

// Images the cluster itself runs, built offline from static binaries.
const (
	PauseImage   = "draingate.local/pause:1"
	CoreDNSImage = "draingate.local/coredns:1"
	// TestAppImage is a small HTTP server and hook binary for tests
	// (proving/testenv/cmd/testapp).
	TestAppImage = "draingate.local/testapp:1"
)

// GoBinary builds the main package pkg of this module (e.g.
// "./proving/testenv/cmd/testapp") as a static binary in the run folder
// and returns its path.
func (c *Cluster) GoBinary(ctx context.Context, pkg string) (string, error) {
	if c.moduleRT == "" {
		return "", fmt.Errorf("build %s: not inside the draingate module", pkg)
	}
	out := filepath.Join(c.paths.images(), filepath.Base(pkg))
	if err := os.MkdirAll(c.paths.images(), 0o755); err != nil {
		return "", err
	}
	ldflags := "-s -w -X draingate.dev/draingate/internal/version.Version=" + buildVersion(ctx, c.moduleRT)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", out, pkg)
	cmd.Dir = c.moduleRT
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// buildVersion is the version GoBinary stamps, as make build does: git
// describe of the checkout at dir, else "dev".
func buildVersion(ctx context.Context, dir string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = dir
	out, err := cmd.Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "dev"
}

// LoadImage writes spec as a tarball and imports it into containerd's k8s.io
// namespace, where the kubelet finds it (pods use imagePullPolicy Never or
// IfNotPresent: there is no registry).
func (c *Cluster) LoadImage(ctx context.Context, spec image.Spec) error {
	tarPath := c.imageTarball(spec.Ref)
	if err := os.MkdirAll(c.paths.images(), 0o755); err != nil {
		return err
	}
	if err := image.WriteTarball(spec, tarPath); err != nil {
		return err
	}
	return c.importTarball(ctx, spec.Ref, tarPath)
}

// ImportImage imports img (built elsewhere, e.g. one platform of a
// release index) into containerd as ref.
func (c *Cluster) ImportImage(ctx context.Context, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := os.MkdirAll(c.paths.images(), 0o755); err != nil {
		return err
	}
	tarPath := c.imageTarball(ref)
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		os.Remove(tarPath)
		return fmt.Errorf("write image %s: %w", ref, err)
	}
	return c.importTarball(ctx, ref, tarPath)
}

func (c *Cluster) imageTarball(ref string) string {
	return filepath.Join(c.paths.images(), strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
}

// importTarball imports the image into every node's containerd.
func (c *Cluster) importTarball(ctx context.Context, ref, tarPath string) error {
	for _, sock := range c.containerdSockets() {
		if err := importInto(ctx, sock, ref, tarPath); err != nil {
			return err
		}
	}
	return nil
}

func importInto(ctx context.Context, socket, ref, tarPath string) error {
	cmd := exec.CommandContext(ctx, "ctr", "--address", socket, "-n", "k8s.io", "images", "import", "--no-unpack=false", tarPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import image %s: %w: %s", ref, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// LoadGoImage builds pkg and loads an image that runs it as /bin/<name>.
func (c *Cluster) LoadGoImage(ctx context.Context, ref, pkg string) error {
	bin, err := c.GoBinary(ctx, pkg)
	if err != nil {
		return err
	}
	name := filepath.Base(bin)
	return c.LoadImage(ctx, image.Spec{
		Ref:        ref,
		Files:      []image.File{{Path: "/bin/" + name, Source: bin}},
		Entrypoint: []string{"/bin/" + name},
	})
}

// loadBaseImages loads what the cluster needs before the kubelet starts.
func (c *Cluster) loadBaseImages(ctx context.Context) error {
	if err := c.LoadGoImage(ctx, PauseImage, "./proving/testenv/cmd/pause"); err != nil {
		return err
	}
	if err := c.LoadImage(ctx, image.Spec{
		Ref:        CoreDNSImage,
		Files:      []image.File{{Path: "/bin/coredns", Source: c.bin("coredns")}},
		Entrypoint: []string{"/bin/coredns"},
	}); err != nil {
		return err
	}
	return c.LoadGoImage(ctx, TestAppImage, "./proving/testenv/cmd/testapp")
}

// TrustRegistry lets the cluster's containerd pull from the registry at
// host (host:port) over HTTPS with a certificate signed by caPEM: a
// registry a test serves, such as one make images pushes to. containerd
// reads the folder at each pull; the folder goes with the run folder.
func (c *Cluster) TrustRegistry(host string, caPEM []byte) error {
	dir := filepath.Join(c.paths.registries(), host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, caPEM, 0o644); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n", "https://"+host, "https://"+host, ca)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}
