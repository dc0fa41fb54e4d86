package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	const rev = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	for _, c := range []struct {
		v    string
		info *debug.BuildInfo
		want string
	}{
		{"v0.1.0", vcs("vcs.revision", rev), "v0.1.0 (go1.26.8, linux/amd64)"},
		{"v0.1.0-3-gabcdef0-dirty", nil, "v0.1.0-3-gabcdef0-dirty (go1.26.8, linux/amd64)"},
		{"dev", vcs("vcs.revision", rev, "vcs.modified", "false"), "dev+1a2b3c4d5e6f (go1.26.8, linux/amd64)"},
		{"dev", vcs("vcs.revision", rev, "vcs.modified", "true"), "dev+1a2b3c4d5e6f.dirty (go1.26.8, linux/amd64)"},
		{"dev", vcs(), "dev (go1.26.8, linux/amd64)"},
		{"dev", nil, "dev (go1.26.8, linux/amd64)"},
	} {
		if got := format(c.v, c.info, "go1.26.8", "linux/amd64"); got != c.want {
			t.Errorf("format(%q, %v) = %q, want %q", c.v, c.info, got, c.want)
		}
	}
}

func TestString(t *testing.T) {
	s := String()
	if !strings.HasPrefix(s, Version) || !strings.HasSuffix(s, "("+runtime.Version()+", "+runtime.GOOS+"/"+runtime.GOARCH+")") {
		t.Errorf("String() = %q", s)
	}
}
