package external

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/route"
)

// Modes of --external-routes.
const (
	// ModeAuto has the kind on when no other kind claims Services (the
	// target-group kind is off, --target-groups=false).
	ModeAuto = "auto"
	ModeOn   = "true"
	ModeOff  = "false"
)

// Config is the kind as the server configures it (a route.Kind).
type Config struct {
	mode string
	tail time.Duration
}

// NewKind returns the kind at its defaults.
func NewKind() *Config { return &Config{mode: ModeAuto, tail: DefaultTail} }

// Name implements route.Kind.
func (k *Config) Name() string { return Kind }

// Flags implements route.Kind.
func (k *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&k.mode, "external-routes", ModeAuto, "treat every Service of type LoadBalancer that no other kind of route claims as a route of a load balancer "+
		"draingate cannot query, held for --tail-external after the pod's endpoint goes out: true, false, or auto (true when --target-groups=false)")
	fs.DurationVar(&k.tail, "tail-external", DefaultTail, "how long a load balancer draingate cannot query (another cloud's, on-premises) may still send to a pod after its endpoint went out; "+
		"a Service's "+TailAnnotation+" annotation overrides it")
}

// Validate implements route.Kind.
func (k *Config) Validate() error {
	var err error
	switch k.mode {
	case ModeAuto, ModeOn, ModeOff:
	default:
		err = fmt.Errorf("--external-routes %q: want auto, true or false", k.mode)
	}
	return errors.Join(err, cli.NotNegative("--tail-external", k.tail))
}

// Tails implements route.Kind.
func (k *Config) Tails() []route.Tail {
	return []route.Tail{{Name: "external", Flag: "tail-external", Value: k.tail}}
}

// Open implements route.Kind: nil when the flag turns the kind off.
func (k *Config) Open(context.Context, route.Env) (route.Source, error) {
	if k.mode == ModeOff {
		return nil, nil
	}
	return New(k.tail, k.mode == ModeOn), nil
}
