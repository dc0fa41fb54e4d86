package cli

import (
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	var ran []string
	commands := map[string]func([]string) int{
		"serve": func(args []string) int { ran = append(ran, strings.Join(args, " ")); return 7 },
	}
	for _, c := range []struct {
		args           []string
		code           int
		stdout, stderr string
		ranWith        string
	}{
		{[]string{"serve", "--x", "1"}, 7, "", "", "--x 1"},
		{nil, 2, "", "usage: p serve\n", ""},
		{[]string{"bogus"}, 2, "", `p: unknown command "bogus"` + "\nusage: p serve\n", ""},
		{[]string{"--help"}, 0, "usage: p serve\n", "", ""},
		{[]string{"version"}, 0, "p dev", "", ""},
		{[]string{"version", "x"}, 2, "", "version takes no arguments", ""},
	} {
		ran = nil
		var stdout, stderr strings.Builder
		code := Dispatch("p", "usage: p serve\n", commands, c.args, &stdout, &stderr)
		if code != c.code || !strings.HasPrefix(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) ||
			c.stdout == "" && stdout.Len() > 0 || c.stderr == "" && stderr.Len() > 0 {
			t.Errorf("%q: code %d stdout %q stderr %q, want %d %q %q", c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr)
		}
		if got := strings.Join(ran, "|"); got != c.ranWith {
			t.Errorf("%q: ran with %q, want %q", c.args, got, c.ranWith)
		}
	}
}
