package server

import (
	"bytes"
	"flag"
	"testing"

	"draingate.dev/draingate/internal/route"
)

// routeKinds returns the server's kinds configured by args, as the command
// line configures them.
func routeKinds(t testing.TB, args ...string) []route.Kind {
	t.Helper()
	kinds := Kinds()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	for _, k := range kinds {
		k.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if err := k.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	return kinds
}
