package release

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"

	"draingate.dev/draingate/release/chart"
)

// The GitHub workflows cannot run here: actionlint checks them (syntax,
// expressions, action inputs), every `make X` they run is a Makefile
// target, CI runs the README's make test, every out/ file the release
// reads, attaches or attests is one make images or make chart writes, and
// every action is pinned by commit (see checkPinned).
func TestWorkflows(t *testing.T) {
	root := ".."
	paths, err := filepath.Glob(filepath.Join(root, ".github", "workflows", "*.yml"))
	if err != nil || len(paths) < 2 {
		t.Fatalf("workflows: %v, %v; want ci.yml and release.yml", paths, err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][\w-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	// What make images and make chart write (the chart's package named by
	// a glob, as the release names it).
	produced := map[string]bool{"out/images/" + DigestsFile: true, "out/" + ChartDigestsFile: true, "out/draingate-*.tgz": true,
		"out/plugin/" + Plugin.Name + "-*": true, "out/plugin/" + PluginSums: true}
	for _, b := range Binaries {
		produced["out/images/"+b.Name+".cdx.json"] = true
		for _, a := range DefaultArches {
			produced["out/images/bin/"+b.Name+"-linux-"+a] = true
		}
	}
	lint, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	makeCmd := regexp.MustCompile(`\bmake\s+([a-z][\w-]*)`)
	outPath := regexp.MustCompile(`\bout/[\w./*-]+`)
	ranTest := false
	pins := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		errs, err := lint.Lint(p, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		// actionlint checks the inputs and outputs of the popular actions it
		// knows by tag (owner/repo@v4), not by commit: lint again with each
		// pin read as its tag's major version.
		asTags, err := lint.Lint(p, pinnedAsTag.ReplaceAll(b, []byte("${1}@${3}${2}")), nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range append(errs, asTags...) {
			msg := fmt.Sprintf("%s:%d: %s [%s]", filepath.Base(p), e.Line, e.Message, e.Kind)
			if !seen[msg] {
				t.Error(msg)
			}
			seen[msg] = true
		}
		wf, perrs := actionlint.Parse(b)
		if len(perrs) > 0 {
			continue // reported above
		}
		checkPinned(t, filepath.Base(p), b, wf, pins)
		for id, job := range wf.Jobs {
			for _, st := range job.Steps {
				if a, ok := st.Exec.(*actionlint.ExecAction); ok {
					for _, in := range a.Inputs {
						for _, f := range outPath.FindAllString(in.Value.Value, -1) {
							if !produced[f] {
								t.Errorf("%s job %s gives %s %s, which make images and make chart do not write", filepath.Base(p), id, a.Uses.Value, f)
							}
						}
					}
				}
				run, ok := st.Exec.(*actionlint.ExecRun)
				if !ok || run.Run == nil {
					continue
				}
				for _, m := range makeCmd.FindAllStringSubmatch(run.Run.Value, -1) {
					if !targets[m[1]] {
						t.Errorf("%s job %s runs make %s: no such Makefile target", filepath.Base(p), id, m[1])
					}
					ranTest = ranTest || (filepath.Base(p) == "ci.yml" && m[1] == "test")
				}
				for _, f := range outPath.FindAllString(run.Run.Value, -1) {
					if !produced[f] {
						t.Errorf("%s job %s uses %s, which make images and make chart do not write", filepath.Base(p), id, f)
					}
				}
			}
		}
	}
	if !ranTest {
		t.Error("ci.yml does not run make test, the README's command")
	}
	if !targets["images"] || !targets["chart"] {
		t.Error("the Makefile lacks the images or chart target the release runs")
	}
}

// releaseWorkflow reads and parses .github/workflows/release.yml.
func releaseWorkflow(t *testing.T) *actionlint.Workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	wf, errs := actionlint.Parse(b)
	if len(errs) > 0 {
		t.Fatalf("release.yml: %v", errs[0])
	}
	return wf
}

// The release pushes where the chart's defaults point: release.yml's
// REGISTRY is Registry, values.yaml's image.repository and
// agent.image.repository are REGISTRY/draingate and
// REGISTRY/draingate-prestop, and make images and make chart push there.
func TestReleaseRegistry(t *testing.T) {
	wf := releaseWorkflow(t)
	var registry string
	var runs []string
	for _, job := range wf.Jobs {
		if job.Env != nil {
			for _, v := range job.Env.Vars {
				if v.Name.Value == "REGISTRY" {
					registry = v.Value.Value
				}
			}
		}
		for _, st := range job.Steps {
			if run, ok := st.Exec.(*actionlint.ExecRun); ok && run.Run != nil {
				runs = append(runs, run.Run.Value)
			}
		}
	}
	if registry != Registry {
		t.Errorf("release.yml pushes to REGISTRY %q, want %q (release.Registry)", registry, Registry)
	}
	ch, err := chart.Load()
	if err != nil {
		t.Fatal(err)
	}
	image, _ := ch.Values["image"].(map[string]any)
	agent, _ := ch.Values["agent"].(map[string]any)
	agentImage, _ := agent["image"].(map[string]any)
	for what, got := range map[string]any{"image.repository": image["repository"], "agent.image.repository": agentImage["repository"]} {
		want := registry + "/draingate"
		if what == "agent.image.repository" {
			want += "-prestop"
		}
		if got != want {
			t.Errorf("values.yaml %s = %v, but the release pushes %s", what, got, want)
		}
	}
	all := strings.Join(runs, "\n")
	for _, want := range []string{`make images VERSION="$VERSION" PUSH="$REGISTRY"`, `IMAGES="$REGISTRY"`, `PUSH="oci://$REGISTRY/charts"`} {
		if !strings.Contains(all, want) {
			t.Errorf("release.yml does not run %s", want)
		}
	}
}

// usesLine is a workflow line naming an action or a reusable workflow:
// its reference, and what follows it.
var usesLine = regexp.MustCompile(`(?m)^\s*(?:-\s+)?uses:\s*(\S+)(.*)$`)

// pinned is an action pinned by a full commit SHA with its release tag
// in a trailing comment: owner/repo[/path]@<40 hex> # vX.Y.Z.
var pinned = regexp.MustCompile(`^([\w.-]+/[\w.-]+)(?:/[\w./-]+)?@([0-9a-f]{40})$`)
var pinComment = regexp.MustCompile(`^\s+# (v\d+\.\d+\.\d+)$`)

// pinnedAsTag matches a pinned uses: line: the action (1), the comment
// (2) and its tag's major version (3).
var pinnedAsTag = regexp.MustCompile(`(?m)(uses:\s*[\w.-]+/[\w./-]+)@[0-9a-f]{40}(\s+# (v\d+)\.\d+\.\d+)$`)

// checkPinned: every `uses:` in the workflow file b (parsed: wf) is
// owner/repo@<commit SHA> # vX.Y.Z, a tag moved later cannot change what
// runs, and an action has one pin (SHA and tag) across the workflows
// (pins, by owner/repo).
func checkPinned(t *testing.T, file string, b []byte, wf *actionlint.Workflow, pins map[string]string) {
	t.Helper()
	uses := 0
	for _, job := range wf.Jobs {
		if job.WorkflowCall != nil && job.WorkflowCall.Uses != nil {
			uses++
		}
		for _, st := range job.Steps {
			if a, ok := st.Exec.(*actionlint.ExecAction); ok && a.Uses != nil {
				uses++
			}
		}
	}
	lines := usesLine.FindAllSubmatch(b, -1)
	if len(lines) != uses {
		t.Errorf("%s: %d uses: lines for %d actions: write each as `uses: owner/repo@<sha> # vX.Y.Z` on its own line", file, len(lines), uses)
	}
	for _, m := range lines {
		ref, rest := string(m[1]), string(m[2])
		p := pinned.FindStringSubmatch(ref)
		c := pinComment.FindStringSubmatch(rest)
		if p == nil || c == nil {
			t.Errorf("%s: uses: %s%s: want owner/repo@<40-hex commit SHA> # vX.Y.Z (the tag it is)", file, ref, rest)
			continue
		}
		if major, _, _ := strings.Cut(c[1], "."); actionlint.PopularActions[p[1]+"@"+major] == nil {
			t.Logf("%s: actionlint does not know %s@%s: its inputs go unchecked", file, p[1], major)
		}
		pin := p[2] + " " + c[1]
		if prev, ok := pins[p[1]]; ok && prev != pin {
			t.Errorf("%s: %s pinned at %s here, at %s elsewhere: one pin per action", file, p[1], pin, prev)
		}
		pins[p[1]] = pin
	}
}

// The release signs and attests what it publishes, by the digests the
// release tool recorded: it may mint OIDC tokens and write attestations;
// cosign (installed first) signs every line of out/images/digests.txt and
// out/chart-digests.txt; each image and the chart get a provenance
// attestation pushed beside them, by the digest the Digests step read;
// and every file the GitHub release attaches is attested.
func TestReleaseSignsAndAttests(t *testing.T) {
	wf := releaseWorkflow(t)
	if wf.Permissions == nil {
		t.Fatal("release.yml sets no permissions")
	}
	for _, scope := range []string{"contents", "packages", "id-token", "attestations"} {
		if ps := wf.Permissions.Scopes[scope]; ps == nil || ps.Value.Value != "write" {
			t.Errorf("release.yml: permission %s is not write", scope)
		}
	}
	type attest struct{ name, digest, push, path string }
	var attests []attest
	var installed, signed bool
	var attached string
	for _, job := range wf.Jobs {
		for _, st := range job.Steps {
			switch e := st.Exec.(type) {
			case *actionlint.ExecAction:
				action, _, _ := strings.Cut(e.Uses.Value, "@")
				in := func(k string) string {
					if i := e.Inputs[k]; i != nil {
						return i.Value.Value
					}
					return ""
				}
				switch action {
				case "sigstore/cosign-installer":
					installed = true
				case "actions/attest-build-provenance":
					attests = append(attests, attest{in("subject-name"), in("subject-digest"), in("push-to-registry"), in("subject-path")})
				}
			case *actionlint.ExecRun:
				run := e.Run.Value
				if strings.Contains(run, "cosign sign --yes") {
					if !installed {
						t.Error("release.yml runs cosign before sigstore/cosign-installer")
					}
					signed = strings.Contains(run, `"$1/$name@$digest"`) && strings.Contains(run, `sign "$REGISTRY" < out/images/`+DigestsFile) &&
						strings.Contains(run, `sign "$REGISTRY/charts" < out/`+ChartDigestsFile)
				}
				if strings.Contains(run, "gh release create") {
					attached = run
				}
			}
		}
	}
	if !signed {
		t.Error("release.yml does not cosign sign each REGISTRY/<name>@<digest> of out/images/digests.txt and REGISTRY/charts/<name>@<digest> of out/chart-digests.txt")
	}
	subjects := map[string]bool{}
	for _, b := range Binaries {
		subjects[b.Name] = false
	}
	subjects["charts/draingate"] = false
	var paths []string
	for _, a := range attests {
		if a.path != "" {
			paths = append(paths, strings.Fields(a.path)...)
			continue
		}
		name, ok := strings.CutPrefix(a.name, "${{ env.REGISTRY }}/")
		output := name
		if name == "charts/draingate" {
			output = "chart"
		}
		if _, known := subjects[name]; !ok || !known || a.digest != "${{ steps.digests.outputs."+output+" }}" || a.push != "true" {
			t.Errorf("release.yml attests %s@%s (push-to-registry %q): want REGISTRY/<image or charts/draingate>, its digest from the Digests step, pushed", a.name, a.digest, a.push)
			continue
		}
		subjects[name] = true
	}
	for name, done := range subjects {
		if !done {
			t.Errorf("release.yml attests no provenance of REGISTRY/%s", name)
		}
	}
	files := regexp.MustCompile(`\bout/[\w./*-]+`).FindAllString(attached, -1)
	if len(files) == 0 {
		t.Error("release.yml attaches no files to the GitHub release")
	}
	for _, f := range files {
		if !slices.Contains(paths, f) {
			t.Errorf("release.yml attaches %s to the GitHub release without attesting it (subject-path %q)", f, paths)
		}
	}
}
