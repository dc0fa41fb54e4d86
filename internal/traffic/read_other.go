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
