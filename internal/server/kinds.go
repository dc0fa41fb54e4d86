package server

import (
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/endpointslice"
	"draingate.dev/draingate/internal/route/external"
	"draingate.dev/draingate/internal/route/targetgroup"
)

// Kinds returns the kinds of route the server knows, each at its defaults,
// in the order they observe a pod. This is the one place that names them:
// adding a kind is a folder under internal/route and one line here (see
// package route). The EndpointSlice kind comes first: other kinds ask it
// which Services list a pod; external comes after the kinds that claim
// Services of their own (targetgroup).
func Kinds() []route.Kind {
	return []route.Kind{
		endpointslice.NewKind(),
		targetgroup.NewKind(),
		external.NewKind(),
	}
}
