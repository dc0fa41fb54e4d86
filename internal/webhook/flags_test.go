package webhook

import (
	"flag"
	"io"
	"testing"
)

// The watcher only serves traffic evidence: with evidence off the webhook
// adds none, whatever --inject-watcher says.
func TestWatcherOnlyWithTrafficEvidence(t *testing.T) {
	for _, c := range []struct {
		args     []string
		evidence bool
		want     bool
	}{
		{nil, true, true},
		{[]string{"--inject-watcher=false"}, true, false},
		{nil, false, false},
	} {
		var f Flags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs)
		args := append([]string{"--webhook-listen=127.0.0.1:0", "--agent-image=img", "--webhook-namespace=ns"}, c.args...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		o, err := f.Options(Server{Listen: ":8080", TrafficEvidence: c.evidence})
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		o.Listener.Close()
		if o.Settings.Watcher != c.want {
			t.Errorf("%q, evidence %v: watcher %v, want %v", c.args, c.evidence, o.Settings.Watcher, c.want)
		}
	}
}
