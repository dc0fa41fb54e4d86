package main

import (
	"io"
	"strings"
	"testing"
)

// The first argument "proxy" picks the sidecar, anything else the app: each
// rejects the other's flags before it listens.
func TestRunPicksAppOrProxy(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		undefed string
	}{
		{[]string{"proxy", "-addr=:0"}, "-addr"},
		{[]string{"-listen=:0"}, "-listen"},
		{[]string{"-to=127.0.0.1:1"}, "-to"},
	} {
		err := run(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "flag provided but not defined: "+tc.undefed) {
			t.Errorf("run(%q) = %v; want %s undefined", tc.args, err, tc.undefed)
		}
	}
}
