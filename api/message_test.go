package api

import (
	"errors"
	"testing"
)

func TestOneLine(t *testing.T) {
	err := errors.Join(errors.New("--server: empty"), errors.New("--max-wait: negative"))
	if got, want := OneLine(err.Error()), "--server: empty; --max-wait: negative"; got != want {
		t.Errorf("OneLine = %q, want %q", got, want)
	}
	if got := OneLine("one line"); got != "one line" {
		t.Errorf("OneLine changed a one-line message: %q", got)
	}
}

func TestTruncateQuote(t *testing.T) {
	tests := []struct {
		s     string
		n     int
		trunc string
		quote string
	}{
		{"", 5, "", `""`},
		{"short", 80, "short", `"short"`},
		{"exact", 5, "exact", `"exact"`},
		{"one over", 7, "one ove…", `"one ove…"`},
		{"abc", 0, "…", `"…"`},
		{"abc", -1, "…", `"…"`},
		// é is 2 bytes, € 3: a cut inside one backs off to its first byte.
		{"éé", 3, "é…", `"é…"`},
		{"éé", 4, "éé", `"éé"`},
		{"a€b", 2, "a…", `"a…"`},
		{"a€b", 3, "a…", `"a…"`},
		{"a€b", 4, "a€…", `"a€…"`},
		{"€", 2, "…", `"…"`},
		// Quote escapes what %q escapes; the cut counts the raw bytes.
		{"a\nb\"c", 3, "a\nb…", `"a\nb…"`},
	}
	for _, tc := range tests {
		if got := Truncate(tc.s, tc.n); got != tc.trunc {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.trunc)
		}
		if got := Quote(tc.s, tc.n); got != tc.quote {
			t.Errorf("Quote(%q, %d) = %s, want %s", tc.s, tc.n, got, tc.quote)
		}
	}
}
