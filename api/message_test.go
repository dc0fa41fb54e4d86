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
