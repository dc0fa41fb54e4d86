package release

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"draingate.dev/draingate/internal/cli"
)

const usage = `usage: draingate-release <command> [flags]

  draingate-release images [--out out/images] [--version V] [--push registry/prefix]
      build the draingate and draingate-prestop images for linux/amd64 and
      linux/arm64 as OCI layouts (out/images/<name>) with a CycloneDX SBOM
      beside each (out/images/<name>.cdx.json), reproducibly from
      SOURCE_DATE_EPOCH (default: the last commit's time); print each
      image's digest and sizes and list the digests in
      out/images/digests.txt ("<name> <digest>" lines); with --push, push
      them as <prefix>/<name>:<version> with the Docker credential chain
  draingate-release chart [--out out] [--version V] [--images registry/prefix] [--push oci://registry/prefix]
      package deploy/helm/draingate as out/draingate-<chart version>.tgz:
      appVersion V (the images' default tag), chart version V as SemVer; with
      --images, the default image repositories <prefix>/draingate and
      <prefix>/draingate-prestop; with --push, push it as an OCI artifact
      (helm registry login, or docker login, credentials) and record its
      digest in out/chart-digests.txt ("draingate <digest>")
  draingate-release plugin [--out out/plugin] [--version V] [--platforms os/arch,...]
      build the kubectl plugin (kubectl-draingate) for linux, macOS and
      Windows as out/plugin/kubectl-draingate-<os>-<arch>[.exe], reproducibly,
      with their sums in out/plugin/SHA256SUMS
  draingate-release version
      print the version
`

// Main is draingate-release's command line (make images runs it).
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cli.Dispatch("draingate-release", usage, map[string]func([]string) int{
		"images": func(args []string) int { return imagesCmd(ctx, args, getenv, stdout, stderr) },
		"chart":  func(args []string) int { return chartCmd(ctx, args, getenv, stdout, stderr) },
		"plugin": func(args []string) int { return pluginCmd(ctx, args, getenv, stdout, stderr) },
	}, args, stdout, stderr)
}

func imagesCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("draingate-release images", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "out/images", "folder for the OCI layouts and SBOMs")
	ver := fs.String("version", "", "version stamped into binaries, labels and the tag (default: git describe --tags --always --dirty)")
	rev := fs.String("revision", "", "source revision for the labels (default: git rev-parse HEAD)")
	src := fs.String("source", "", "source repository URL for the labels (default: git remote origin's URL, else https://draingate.dev/draingate)")
	arches := fs.String("arch", strings.Join(DefaultArches, ","), "architectures, comma-separated")
	push := fs.String("push", "", "registry/prefix to push to (e.g. ghcr.io/acme); empty: build only")
	o, code := setup(ctx, fs, args, getenv, stderr, ver)
	if code >= 0 {
		return code
	}
	o.Out, o.Log = *out, stderr
	o.Revision = cmp.Or(*rev, git(ctx, o.Root, "rev-parse", "HEAD"))
	o.Source = cmp.Or(*src, git(ctx, o.Root, "remote", "get-url", "origin"), "https://draingate.dev/draingate")
	for _, a := range strings.Split(*arches, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.Arches = append(o.Arches, a)
		}
	}
	start := time.Now()
	fmt.Fprintf(stderr, "images: version %s, revision %s, created %s, for %s\n", o.Version, o.Revision, o.Created.Format(time.RFC3339), strings.Join(o.Arches, ", "))
	images, err := Build(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "draingate-release images:", err)
		return 1
	}
	for _, img := range images {
		var sizes []string
		for _, a := range o.Arches {
			sizes = append(sizes, fmt.Sprintf("linux/%s %.1f MiB", a, float64(img.Sizes[a])/(1<<20)))
		}
		fmt.Fprintf(stdout, "%s %s (%s) layout %s sbom %s\n", img.Name, img.Digest, strings.Join(sizes, ", "), img.Layout, img.SBOM)
	}
	fmt.Fprintf(stderr, "images: done in %s\n", time.Since(start).Round(time.Second))
	if *push != "" {
		refs, err := Push(ctx, images, strings.TrimSuffix(*push, "/"), o.Version)
		for _, r := range refs {
			fmt.Fprintln(stdout, "pushed", r)
		}
		if err != nil {
			fmt.Fprintln(stderr, "draingate-release images:", err)
			return 1
		}
	}
	return 0
}

func pluginCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("draingate-release plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "out/plugin", "folder for the binaries and their sums")
	ver := fs.String("version", "", "version stamped into the binaries (default: git describe --tags --always --dirty)")
	platforms := fs.String("platforms", strings.Join(PluginPlatforms, ","), "os/arch pairs, comma-separated")
	o, code := setup(ctx, fs, args, getenv, stderr, ver)
	if code >= 0 {
		return code
	}
	o.Out = *out
	var ps []string
	for _, p := range strings.Split(*platforms, ",") {
		if p = strings.TrimSpace(p); p != "" {
			ps = append(ps, p)
		}
	}
	paths, err := BuildPlugin(ctx, o, ps)
	if err != nil {
		fmt.Fprintln(stderr, "draingate-release plugin:", err)
		return 1
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, "plugin", p)
	}
	return 0
}

func chartCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("draingate-release chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "out", "folder for the packaged chart")
	ver := fs.String("version", "", "the release's version: the chart's appVersion and, as SemVer, its version (default: git describe --tags --always --dirty)")
	images := fs.String("images", "", "registry/prefix the images were pushed to (make images PUSH=…): the chart's default image repositories; empty: keep the chart's")
	push := fs.String("push", "", "oci://registry/prefix to push the chart to; empty: package only")
	from := fs.String("digests-from", "", "folder of make images' OCI layouts (out/images): the chart's default image digests pin those images by content; empty, or the layouts absent: by tag only")
	o, code := setup(ctx, fs, args, getenv, stderr, ver)
	if code >= 0 {
		return code
	}
	o.Out = *out
	var digests map[string]string
	if *from != "" {
		d, ok, err := LayoutDigests(*from, o.Version)
		if err != nil {
			fmt.Fprintln(stderr, "draingate-release chart:", err)
			return 1
		}
		if ok {
			digests = d
		} else {
			fmt.Fprintf(stderr, "draingate-release chart: no image layouts in %s (run make images first to pin digests): images by tag only\n", *from)
		}
	}
	path, err := Chart(o, *images, digests)
	if err != nil {
		fmt.Fprintln(stderr, "draingate-release chart:", err)
		return 1
	}
	fmt.Fprintf(stdout, "chart %s (version %s, appVersion %s)\n", path, ChartVersion(o.Version), o.Version)
	if *push != "" {
		ref, err := PushChart(path, *push)
		if err != nil {
			fmt.Fprintln(stderr, "draingate-release chart:", err)
			return 1
		}
		fmt.Fprintln(stdout, "pushed", ref)
	}
	return 0
}

// setup parses a command's flags and finds what every command needs: the
// module's root, the creation time (SOURCE_DATE_EPOCH) and the version
// (*version, else git describe, else "dev"). A code of 0 or more means stop
// with it (the error is written to stderr); -1 means go on.
func setup(ctx context.Context, fs *flag.FlagSet, args []string, getenv func(string) string, stderr io.Writer, version *string) (Options, int) {
	if err := fs.Parse(args); err != nil {
		return Options{}, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return Options{}, 2
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return Options{}, 1
	}
	created, err := sourceDate(ctx, root, getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return Options{}, 2
	}
	v := cmp.Or(*version, git(ctx, root, "describe", "--tags", "--always", "--dirty"), "dev")
	return Options{Root: root, Created: created, Version: v}, -1
}

// sourceDate is SOURCE_DATE_EPOCH's time; unset, the last commit's time
// at root; without git, the Unix epoch.
func sourceDate(ctx context.Context, root, env string) (time.Time, error) {
	if env == "" {
		env = git(ctx, root, "log", "-1", "--format=%ct")
	}
	if env == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(env, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970 (e.g. $(git log -1 --format=%%ct))", env)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// git runs git at dir and returns its trimmed output, "" on any failure.
func git(ctx context.Context, dir string, args ...string) string {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// moduleRoot is the folder holding draingate's go.mod, from the working
// directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module draingate.dev/draingate\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the draingate checkout (no go.mod of draingate.dev/draingate above the working folder)")
		}
		dir = parent
	}
}
