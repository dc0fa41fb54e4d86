package server

import (
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/endpointslice"
	"draingate.dev/draingate/internal/route/external"
	"draingate.dev/draingate/internal/route/targetgroup"
)

// Kinds returns the kinds of route the server knows, each at its defaults,
// in the order they observe a pod; nothing else hangs on that order (what
// a kind needs of Services, or of the load balancers another kind reads,
// comes through route.Host). This is the one place that names them: adding a
// kind is a folder under internal/route and one line here (see package
// route).
func Kinds() []route.Kind {
	return []route.Kind{
		endpointslice.NewKind(),
		targetgroup.NewKind(),
		external.NewKind(),
	}
}
