package evidence

import (
	"testing"

	"draingate.dev/draingate/api"
)

// fallGap weighs the pace only where the long-gap fit covers the longest
// gap (at least minLongGaps gaps in its bin or above) and the source
// spreads its arrivals (an empty look seldom followed by another); else
// the longest gap.
func TestFallGap(t *testing.T) {
	const k, m = 700.0, 1000.0 // looks with data, of looks: a pace of 1.43 looks
	for _, c := range []struct {
		name   string
		long   int // gaps of 4-7 looks, the longest's bin
		pauses int // runs of empty looks among the 300 empty ones
		want   float64
	}{
		{"stalls the fit covers, spread arrivals", 3, 250, m / k},
		{"two long gaps: not covered", 2, 250, 5},
		{"empty looks in runs as random arrivals'", 3, 190, 5},
	} {
		a := Arrivals{Looks: Looks{N: int(m), Pauses: c.pauses},
			Gaps: []api.GapBin{{N: 699 - 250 - c.long}, {N: 250, Sum: 500}, {N: c.long, Sum: 5 * c.long}}}
		if got := fallGap(a, 5, k, m); got != c.want {
			t.Errorf("%s: %.2f looks, want %.2f", c.name, got, c.want)
		}
	}
}
