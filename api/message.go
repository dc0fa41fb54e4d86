package api

import "strings"

// OneLine puts a multi-line message (errors.Join gives one line per error)
// on one line, its lines separated by "; ": for a message in a Verdict or an
// error response, and for the agent's one-line log entries.
func OneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }
