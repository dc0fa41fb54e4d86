package endpointslice

import (
	"context"
	"errors"
	"flag"
	"time"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/route"
)

// Config is the kind as the server configures it (a route.Kind): always
// on, with one flag, the routes' tail.
type Config struct {
	tail, localTail time.Duration
}

// NewKind returns the kind at its defaults.
func NewKind() *Config { return &Config{tail: DefaultTail, localTail: DefaultLocalTail} }

// Name implements route.Kind.
func (k *Config) Name() string { return Kind }

// Flags implements route.Kind.
func (k *Config) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&k.tail, "tail-endpointslice", DefaultTail, "how long after an EndpointSlice drops the pod kube-proxy, ingress controllers and meshes may still send to it")
	fs.DurationVar(&k.localTail, "tail-local-policy", DefaultLocalTail, "how long a load balancer may still send a node's traffic after the node's last ready endpoint "+
		"of a Service with externalTrafficPolicy Local went (its health checks drain the node); a Service's "+LocalTailAnnotation+" annotation overrides it")
}

// Validate implements route.Kind.
func (k *Config) Validate() error {
	return errors.Join(cli.NotNegative("--tail-endpointslice", k.tail), cli.NotNegative("--tail-local-policy", k.localTail))
}

// Tails implements route.Kind.
func (k *Config) Tails() []route.Tail {
	return []route.Tail{{Name: "endpointslice", Flag: "tail-endpointslice", Value: k.tail},
		{Name: "local-policy", Flag: "tail-local-policy", Value: k.localTail}}
}

// Open implements route.Kind.
func (k *Config) Open(context.Context, route.Env) (route.Source, error) {
	return New(k.tail, k.localTail), nil
}
