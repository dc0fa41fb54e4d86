package server

import (
	"testing"

	"draingate.dev/draingate/internal/drain/draintest"
	"draingate.dev/draingate/internal/route"
)

// closing is a route source whose work outlives the server's context.
type closing struct {
	*draintest.Source
	closed int
}

func (c *closing) Close() { c.closed++ }

// At shutdown the sources holding work of their own are closed, once; the
// others have nothing to close.
func TestCloseRoutes(t *testing.T) {
	c := &closing{Source: draintest.NewSource(nil)}
	s := &Server{sources: []route.Source{draintest.NewSource(nil), c}}
	s.closeRoutes()
	if c.closed != 1 {
		t.Errorf("closed %d times, want once", c.closed)
	}
}
