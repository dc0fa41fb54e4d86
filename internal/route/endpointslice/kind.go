package endpointslice

import (
	"context"
	"flag"
	"time"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/route"
)

// Config is the kind as the server configures it (a route.Kind): always
// on, with one flag, the routes' tail.
type Config struct {
	tail time.Duration
}

// NewKind returns the kind at its defaults.
func NewKind() *Config { return &Config{tail: DefaultTail} }

// Name implements route.Kind.
func (k *Config) Name() string { return Kind }

// Flags implements route.Kind.
func (k *Config) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&k.tail, "tail-endpointslice", DefaultTail, "how long after an EndpointSlice drops the pod kube-proxy, ingress controllers and meshes may still send to it")
}

// Validate implements route.Kind.
func (k *Config) Validate() error { return cli.NotNegative("--tail-endpointslice", k.tail) }

// Tails implements route.Kind.
func (k *Config) Tails() []route.Tail {
	return []route.Tail{{Name: "endpointslice", Flag: "tail-endpointslice", Value: k.tail}}
}

// Open implements route.Kind.
func (k *Config) Open(context.Context, route.Env) (route.Source, error) { return New(k.tail), nil }
