package api

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// OneLine puts a multi-line message (errors.Join gives one line per error)
// on one line, its lines separated by "; ": for a message in a Verdict or an
// error response, and for the agent's one-line log entries.
func OneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

// Truncate cuts s to at most n bytes, backing off to a UTF-8 character
// boundary so the cut never splits a character, and marks the cut with "…".
// A string of at most n bytes comes back as it is.
func Truncate(s string, n int) string {
	n = max(n, 0)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Quote quotes a caller's value for a message, cut by Truncate to n bytes so
// a huge value cannot flood a log line, a response body or a warning: the
// point is to recognise the value, not reprint it. The cut's "…" is inside
// the quotes, as in "abc…".
func Quote(s string, n int) string { return fmt.Sprintf("%q", Truncate(s, n)) }

// The words of a verdict's sentences, shared by the gate and the evidence
// so that a route's detail reads as one voice.

// Stamp formats a time for a detail sentence: UTC, to the millisecond.
func Stamp(t time.Time) string { return t.UTC().Format("15:04:05.000Z07:00") }

// CountNoun is "1 route" or "3 routes".
func CountNoun(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// LastReadFailed is the clause a route's detail ends with when its owner's
// last read failed (nothing when err is nil): the detail then describes
// the last good read.
func LastReadFailed(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("; the last read failed (%v), so this is the last good observation", err)
}
