package lab

import (
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// TestLoadStatuses: the consistency check's note lists the load
// generator's answers by status, transport errors as 0, and at most three
// of its distinct errors.
func TestLoadStatuses(t *testing.T) {
	l := &load{}
	for _, r := range []vegeta.Result{{Code: 200}, {Code: 502}, {Code: 200}, {Error: "e1"}, {Error: "e2"}, {Error: "e3"}, {Error: "e4"}} {
		l.metrics.Add(&r)
	}
	l.metrics.Close()
	if got, want := l.statuses(), "0=4 200=2 502=1 errors: e1; e2; e3; 1 more"; got != want {
		t.Errorf("statuses() = %q, want %q", got, want)
	}
}
