package evidence

import (
	"testing"

	"draingate.dev/draingate/api"
)

// fallGap weighs the pace only over a watch of paceWatch or more, of a
// source that spreads its arrivals (an empty look seldom followed by
// another); else the longest gap.
func TestFallGap(t *testing.T) {
	const k, m = 700.0, 1000.0 // looks with data, of looks: a pace of 1.43 looks
	for _, c := range []struct {
		name   string
		span   float64 // seconds watched
		pauses int     // runs of empty looks among the 300 empty ones
		want   float64
		pace   bool
	}{
		{"two minutes, spread arrivals", 120, 250, m / k, true},
		{"45 seconds", 45, 250, m / k, true},
		{"20 seconds", 20, 250, 5, false},
		{"empty looks in runs as random arrivals'", 120, 190, 5, false},
	} {
		a := Arrivals{Looks: Looks{N: int(m), Pauses: c.pauses},
			Gaps: []api.GapBin{{N: 446}, {N: 250, Sum: 500}, {N: 3, Sum: 15}}}
		if got, pace := fallGap(a, 5, k, m, c.span, 0.1); got != c.want || pace != c.pace {
			t.Errorf("%s: %.2f looks (pace %v), want %.2f (pace %v)", c.name, got, pace, c.want, c.pace)
		}
	}
}
