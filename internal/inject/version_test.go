package inject

import (
	"testing"

	"k8s.io/apimachinery/pkg/version"
)

func TestImageVolumesOnByDefault(t *testing.T) {
	for _, c := range []struct {
		major, minor string
		want         bool
	}{
		{"1", "34", false}, {"1", "35", true}, {"1", "35+", true}, {"1", "36", true}, {"2", "0", true}, {"1", "", false}, {"", "", false},
	} {
		if got := ImageVolumesOnByDefault(&version.Info{Major: c.major, Minor: c.minor}); got != c.want {
			t.Errorf("%s.%s: %v, want %v", c.major, c.minor, got, c.want)
		}
	}
}
