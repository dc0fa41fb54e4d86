package release

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"

	"draingate.dev/draingate/release/chart"
)

// ChartVersion is a draingate version as a Helm chart version (SemVer
// 2): "v1.2.3" → "1.2.3"; a version that is not SemVer (git describe's
// "1a2b3c4-dirty") becomes a pre-release of 0.0.0 ("0.0.0-1a2b3c4-dirty").
func ChartVersion(v string) string {
	if sv, err := semver.StrictNewVersion(strings.TrimPrefix(v, "v")); err == nil {
		return sv.String()
	}
	clean := regexp.MustCompile(`[^0-9A-Za-z.-]+`).ReplaceAllString(v, "-")
	clean = strings.Trim(regexp.MustCompile(`\.\.+`).ReplaceAllString(clean, "."), ".-")
	if clean == "" {
		clean = "dev"
	}
	return "0.0.0-" + clean
}

// Registry is where a tagged release pushes (.github/workflows/release.yml's
// REGISTRY): the images as Registry/draingate and Registry/draingate-prestop,
// the chart's default image repositories in values.yaml, and the chart as
// Registry/charts/draingate.
const Registry = "ghcr.io/draingate"

// defaultRepository matches the chart's two default image repositories
// in values.yaml (Registry's).
var defaultRepository = regexp.MustCompile(`(?m)^(\s*repository: )` + regexp.QuoteMeta(Registry) + `/(draingate(?:-prestop)?)[ \t]*$`)

// defaultDigest matches the chart's two empty image digests in values.yaml:
// image.digest (indented 2) and agent.image.digest (indented 4).
var defaultDigest = regexp.MustCompile(`(?m)^(  |    )digest: ""[ \t]*$`)

// Chart packages deploy/helm/draingate as Out/draingate-<chart
// version>.tgz: Chart.yaml's appVersion is o.Version (so the images'
// default tag is the release's), its version ChartVersion(o.Version); with
// imagePrefix, the default image repositories become
// <imagePrefix>/draingate and <imagePrefix>/draingate-prestop (values.yaml
// keeps its comments); with digests (the images' index digests by name,
// "draingate" and "draingate-prestop", as LayoutDigests reads them), the
// default image.digest and agent.image.digest pin those images by content.
// Every file is stamped with o.Created, so the same inputs give the same
// bytes. It returns the package's path.
func Chart(o Options, imagePrefix string, digests map[string]string) (string, error) {
	ch, err := chart.Load()
	if err != nil {
		return "", err
	}
	ch.Metadata.Version = ChartVersion(o.Version)
	ch.Metadata.AppVersion = o.Version
	if imagePrefix != "" {
		imagePrefix = strings.TrimSuffix(imagePrefix, "/")
		found := false
		for _, f := range ch.Raw {
			if f.Name != chartutil.ValuesfileName {
				continue
			}
			if n := len(defaultRepository.FindAllIndex(f.Data, -1)); n != 2 {
				return "", fmt.Errorf("chart: values.yaml names %d default image repositories (%s/…), want 2: update release.Registry", n, Registry)
			}
			f.Data = defaultRepository.ReplaceAll(f.Data, []byte("${1}"+imagePrefix+"/${2}"))
			found = true
		}
		if !found {
			return "", fmt.Errorf("chart: no values.yaml")
		}
		image, _ := ch.Values["image"].(map[string]any)
		agent, _ := ch.Values["agent"].(map[string]any)
		agentImage, _ := agent["image"].(map[string]any)
		if image == nil || agentImage == nil {
			return "", fmt.Errorf("chart: values image.repository or agent.image.repository missing")
		}
		image["repository"] = imagePrefix + "/draingate"
		agentImage["repository"] = imagePrefix + "/draingate-prestop"
	}
	if len(digests) > 0 {
		if err := pinDigests(ch, digests); err != nil {
			return "", err
		}
	}
	ch.ModTime = o.Created
	ch.SchemaModTime = o.Created
	for _, f := range ch.Raw {
		f.ModTime = o.Created
	}
	for _, f := range ch.Templates {
		f.ModTime = o.Created
	}
	for _, f := range ch.Files {
		f.ModTime = o.Created
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return "", err
	}
	path, err := chartutil.Save(ch, o.Out)
	if err != nil {
		return "", fmt.Errorf("chart: package: %w", err)
	}
	return path, nil
}

// PushChart pushes the packaged chart at path to the OCI registry
// repository prefix ("oci://registry/prefix": the chart lands at
// registry/prefix/draingate:<chart version>), with Helm's registry
// credentials (helm registry login) falling back to Docker's, and records
// the pushed digest beside the package (ChartDigestsFile). It returns the
// reference pushed, with its tag and digest.
func PushChart(path, prefix string, opts ...registry.ClientOption) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("push chart: %s: %w", path, err)
	}
	repo, ok := strings.CutPrefix(strings.TrimSuffix(prefix, "/"), "oci://")
	if !ok || repo == "" {
		return "", fmt.Errorf("push chart: %q: want oci://registry/prefix", prefix)
	}
	record := filepath.Join(filepath.Dir(path), ChartDigestsFile)
	if err := os.Remove(record); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return "", fmt.Errorf("push chart: %w", err)
	}
	ref := repo + "/" + ch.Metadata.Name + ":" + ch.Metadata.Version
	res, err := client.Push(data, ref)
	if err != nil {
		return "", fmt.Errorf("push chart to %s: %w", ref, err)
	}
	if err := writeDigests(record, map[string]string{ch.Metadata.Name: res.Manifest.Digest}); err != nil {
		return "", fmt.Errorf("push chart: %w", err)
	}
	return res.Ref + "@" + res.Manifest.Digest, nil
}

// pinDigests sets the chart's default image.digest and agent.image.digest
// to digests["draingate"] and digests["draingate-prestop"], in values.yaml
// (its comments kept) and in the loaded values.
func pinDigests(ch *chartv2.Chart, digests map[string]string) error {
	server, agent := digests["draingate"], digests["draingate-prestop"]
	if server == "" || agent == "" {
		return fmt.Errorf("chart: digests of both images needed (draingate, draingate-prestop), got %v", digests)
	}
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if n := len(defaultDigest.FindAllIndex(f.Data, -1)); n != 2 {
			return fmt.Errorf("chart: values.yaml has %d empty image digests, want 2: update release.defaultDigest", n)
		}
		f.Data = defaultDigest.ReplaceAllFunc(f.Data, func(line []byte) []byte {
			d := server
			if strings.HasPrefix(string(line), "    ") {
				d = agent
			}
			return []byte(strings.Replace(string(line), `""`, strconv.Quote(d), 1))
		})
	}
	image, _ := ch.Values["image"].(map[string]any)
	agentValues, _ := ch.Values["agent"].(map[string]any)
	agentImage, _ := agentValues["image"].(map[string]any)
	if image == nil || agentImage == nil {
		return fmt.Errorf("chart: values image or agent.image missing")
	}
	image["digest"], agentImage["digest"] = server, agent
	return nil
}

// LayoutDigests reads, from dir (make images' output), the index digest
// of each image's OCI layout (dir/draingate, dir/draingate-prestop): what
// a push of them publishes. ok is false when either layout is missing; a
// layout built for another version than version (its ref name) is an
// error: pinning it would install older images than the chart's tag says.
func LayoutDigests(dir, version string) (digests map[string]string, ok bool, err error) {
	digests = map[string]string{}
	for _, name := range []string{"draingate", "draingate-prestop"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(filepath.Join(path, "index.json")); errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		top, err := layout.ImageIndexFromPath(path)
		if err != nil {
			return nil, false, err
		}
		m, err := top.IndexManifest()
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		if len(m.Manifests) != 1 {
			return nil, false, fmt.Errorf("%s: %d images, want the one make images writes", path, len(m.Manifests))
		}
		if built := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; built != version {
			return nil, false, fmt.Errorf("%s was built for version %q, not %q: run make images VERSION=%s first (or remove %s to pin no digests)", path, built, version, version, dir)
		}
		digests[name] = m.Manifests[0].Digest.String()
	}
	return digests, true, nil
}

// DigestsFile and ChartDigestsFile record what a release publishes, by
// digest, for the release workflow to sign and attest: a line "<name>
// <digest>" each, the artifact being pushed as <prefix>/<name>@<digest>.
// make images writes DigestsFile in its folder (out/images/digests.txt):
// each image's index digest, read back from the layout it wrote, which a
// push publishes unchanged. make chart PUSH=… writes ChartDigestsFile
// beside the package (out/chart-digests.txt): the chart's manifest digest,
// as the registry took it.
const (
	DigestsFile      = "digests.txt"
	ChartDigestsFile = "chart-digests.txt"
)

// RecordDigests writes dir/DigestsFile from the image layouts in dir
// (LayoutDigests: both must be there, built for version).
func RecordDigests(dir, version string) error {
	digests, ok, err := LayoutDigests(dir, version)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("record digests: no image layouts in %s", dir)
	}
	return writeDigests(filepath.Join(dir, DigestsFile), digests)
}

// writeDigests writes digests (by name) at path, a line "<name> <digest>"
// each, sorted by name.
func writeDigests(path string, digests map[string]string) error {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(digests)) {
		fmt.Fprintf(&b, "%s %s\n", name, digests[name])
	}
	return writeFile(path, []byte(b.String()))
}
