package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The SBOM is CycloneDX 1.5 JSON, read from the module graph the Go
// toolchain records in the binary (what `go version -m` prints): the main
// module, every module linked in and the Go standard library. The graph
// is read from the first arch's binary; the arches link the same modules.

type cdxBOM struct {
	BOMFormat    string         `json:"bomFormat"`
	SpecVersion  string         `json:"specVersion"`
	SerialNumber string         `json:"serialNumber"`
	Version      int            `json:"version"`
	Metadata     cdxMetadata    `json:"metadata"`
	Components   []cdxComponent `json:"components"`
	Dependencies []cdxDependsOn `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	BOMRef     string        `json:"bom-ref,omitempty"`
	Type       string        `json:"type"`
	Name       string        `json:"name"`
	Version    string        `json:"version,omitempty"`
	PURL       string        `json:"purl,omitempty"`
	Properties []cdxProperty `json:"properties,omitempty"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependsOn struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

func goPURL(path, version string) string {
	return "pkg:golang/" + path + "@" + url.PathEscape(version) + "?type=module"
}

// cycloneDX is the SBOM of image name (index digest) whose binary has
// info. Its serial number derives from its content, so that the same
// build gives the same file.
func cycloneDX(name string, o Options, digest v1.Hash, info *buildinfo.BuildInfo) ([]byte, error) {
	mainVersion := o.Version
	main := cdxComponent{BOMRef: goPURL(info.Main.Path, mainVersion), Type: "application", Name: info.Main.Path, Version: mainVersion,
		PURL: goPURL(info.Main.Path, mainVersion)}
	std := cdxComponent{BOMRef: "pkg:golang/stdlib@" + info.GoVersion, Type: "library", Name: "stdlib", Version: info.GoVersion,
		PURL: "pkg:golang/stdlib@" + info.GoVersion}
	comps := []cdxComponent{main, std}
	deps := []string{std.BOMRef}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := cdxComponent{BOMRef: goPURL(m.Path, m.Version), Type: "library", Name: m.Path, Version: m.Version, PURL: goPURL(m.Path, m.Version)}
		if m.Sum != "" {
			c.Properties = []cdxProperty{{Name: "go:module:sum", Value: m.Sum}}
		}
		comps = append(comps, c)
		deps = append(deps, c.BOMRef)
	}
	sort.Slice(comps[2:], func(i, j int) bool { return comps[2+i].Name < comps[2+j].Name })
	sort.Strings(deps)
	var props []cdxProperty
	for _, s := range info.Settings {
		switch s.Key {
		case "CGO_ENABLED", "GOOS", "GOARCH", "-trimpath", "-ldflags":
			props = append(props, cdxProperty{Name: "go:build:" + s.Key, Value: s.Value})
		}
	}
	container := cdxComponent{BOMRef: "pkg:oci/" + name + "@" + url.PathEscape(digest.String()), Type: "container", Name: name, Version: o.Version,
		PURL: "pkg:oci/" + name + "@" + url.PathEscape(digest.String()), Properties: append(props,
			cdxProperty{Name: "org.opencontainers.image.revision", Value: o.Revision},
			cdxProperty{Name: "org.opencontainers.image.source", Value: o.Source})}
	bom := cdxBOM{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		Metadata: cdxMetadata{
			Timestamp: o.Created.UTC().Format("2006-01-02T15:04:05Z"),
			Tools:     cdxTools{Components: []cdxComponent{{Type: "application", Name: "draingate-release", Version: o.Version}}},
			Component: container,
		},
		Components: comps,
		Dependencies: []cdxDependsOn{
			{Ref: container.BOMRef, DependsOn: []string{main.BOMRef}},
			{Ref: main.BOMRef, DependsOn: deps},
		},
	}
	body, err := json.Marshal(bom)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	// A version 4 UUID's layout, from the content's hash.
	sum[6] = sum[6]&0x0f | 0x40
	sum[8] = sum[8]&0x3f | 0x80
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	out, err := json.MarshalIndent(bom, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
