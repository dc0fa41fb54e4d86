// Package testutil holds the helpers draingate's tests share. Only tests
// import it, and it stays standard-library only, so that any package's tests
// can use it (the agent's included).
package testutil

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Eventually calls cond until it reports done, and fails tb (naming what it
// waited for, and cond's last error if any) when ctx ends first. An error
// from cond does not stop the wait: it says why the condition does not hold
// yet. Polls start 10 ms apart and slow down to every 200 ms, so a fast
// in-process condition is seen at once and a cluster's API is not hammered.
// Bound the wait through ctx, e.g. with context.WithTimeout.
func Eventually(tb testing.TB, ctx context.Context, what string, cond func() (bool, error)) {
	tb.Helper()
	var last error
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		done, err := cond()
		if done {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				tb.Fatalf("waiting for %s: %v (last error: %v)", what, context.Cause(ctx), last)
			} else {
				tb.Fatalf("waiting for %s: %v", what, context.Cause(ctx))
			}
			return
		case <-time.After(delay):
		}
	}
}

// SyncBuffer is an io.Writer whose contents a test may read while other
// goroutines still write to it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ClosedListener wraps a net.Listener and tells a test when the code under
// test closed it (Closed is closed then), e.g. when a server's shutdown
// stopped accepting.
type ClosedListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

// NewClosedListener wraps ln.
func NewClosedListener(ln net.Listener) *ClosedListener {
	return &ClosedListener{Listener: ln, closed: make(chan struct{})}
}

// Close closes the listener and marks it closed.
func (l *ClosedListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

// Closed is closed once Close was called.
func (l *ClosedListener) Closed() <-chan struct{} { return l.closed }
