package testutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message instead of
// ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestEventuallyReturnsOnceDone(t *testing.T) {
	calls := 0
	Eventually(t, context.Background(), "the third call", func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

func TestEventuallyFailsWithLastError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r := &fatalRecorder{}
	n := 0
	Eventually(r, ctx, "nothing", func() (bool, error) {
		n++
		if n == 1 {
			return false, errors.New("first")
		}
		return false, nil // no error: the first one stays the last seen
	})
	for _, want := range []string{"waiting for nothing", "deadline exceeded", "last error: first"} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("failure %q does not say %q", r.msg, want)
		}
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 400 {
		t.Errorf("%d bytes, want 400", got)
	}
}
