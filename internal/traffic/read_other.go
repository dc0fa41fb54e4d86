//go:build !linux

package traffic

import (
	"errors"
	"fmt"
)

// Read is Linux only: sock_diag is Linux's, and so are the pods the agent
// runs in.
func Read() (Snapshot, error) {
	return Snapshot{}, fmt.Errorf("reading TCP sockets: %w on this OS", errors.ErrUnsupported)
}

// Reader is Read's, look after look; on Linux it is cheaper between
// connections.
type Reader struct{ Dumps, Lookups int }

// NewReader returns a Reader.
func NewReader() *Reader { return &Reader{} }

// Read takes one snapshot: Read's error on this OS.
func (r *Reader) Read() (Snapshot, error) { return Read() }
