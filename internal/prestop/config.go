package prestop

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/cli"
)

// DefaultPollWait is how long each long-poll asks the server to hold.
const DefaultPollWait = 20 * time.Second

// Config is one run of the agent.
//
// There is no HTTP client to plug in: the agent speaks plain HTTP/1.1 over
// net itself (see httpget.go). Tests point Server at a loopback listener.
type Config struct {
	// Server is the gate server's root URL, http:// only.
	Server string
	// The pod asking, from the downward API.
	Namespace, Pod, UID string
	// MaxWait bounds the whole wait, from Run's start; zero means do not
	// wait, only run the hook.
	MaxWait time.Duration
	// Fallback is how long, from the start, the agent keeps trying to reach
	// a gate server that has never answered (or waits after one refused the
	// request) before it gives up; capped by MaxWait. The first ask is
	// always made, for up to 5 s, even with a zero Fallback. Once any
	// server has answered, only MaxWait ends the wait.
	Fallback time.Duration
	// PollWait is the wait each long-poll asks for (default 20 s).
	PollWait time.Duration
	// Traffic, when set, is called before every ask for the evidence of
	// what the pod still receives (see internal/traffic), sent along as
	// the request's traffic; it may return nil (no evidence). Nil sends
	// none, and the server relies on route tails alone.
	Traffic func() *api.Traffic
	// TokenFile, when set, holds a token bound to the pod, read before
	// every ask (the kubelet renews it) and sent as a bearer token.
	TokenFile string
	// Then is the container's original preStop hook, run after the wait.
	Then Hook
	// Out gets one line per decision, and the exec hook's output; nil
	// discards.
	Out io.Writer
}

// Validate reports what in cfg would make asking pointless, as one error.
func (cfg Config) Validate() error {
	var errs []error
	if _, err := checkHTTPURL(cfg.Server); err != nil {
		errs = append(errs, fmt.Errorf("server: %w", err))
	}
	req := api.DrainRequest{Namespace: cfg.Namespace, Pod: cfg.Pod, UID: cfg.UID}
	if err := req.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, cli.NotNegative("max-wait", cfg.MaxWait), cli.NotNegative("fallback", cfg.Fallback),
		cli.NotNegative("poll-wait", cfg.PollWait))
	return errors.Join(errs...)
}

// Hook is the container's original preStop hook. At most one field is set;
// the zero Hook runs nothing.
type Hook struct {
	// Exec is an argv run as a child with the agent's environment (the
	// container's); the first element is looked up in PATH.
	Exec []string
	// HTTPGet is an http:// URL to GET, as the kubelet's httpGet handler
	// would; any answer counts as done, its status is logged.
	HTTPGet string
	// Sleep is a pause, like the kubelet's sleep action.
	Sleep time.Duration
}

// IsZero reports whether h runs nothing.
func (h Hook) IsZero() bool { return len(h.Exec) == 0 && h.HTTPGet == "" && h.Sleep == 0 }

// Validate reports a hook that cannot run: more than one action, or a bad
// URL or duration.
func (h Hook) Validate() error {
	n := 0
	if len(h.Exec) > 0 {
		n++
	}
	if h.HTTPGet != "" {
		n++
		if _, err := checkHTTPURL(h.HTTPGet); err != nil {
			return fmt.Errorf("http-get hook: %w", err)
		}
	}
	if h.Sleep != 0 {
		n++
		if h.Sleep < 0 {
			return fmt.Errorf("sleep hook: %s is negative", h.Sleep)
		}
	}
	if n > 1 {
		return errors.New("a hook has one action: exec, http-get or sleep")
	}
	return nil
}

func (h Hook) String() string {
	switch {
	case len(h.Exec) > 0:
		return "exec " + strings.Join(h.Exec, " ")
	case h.HTTPGet != "":
		return "http-get " + h.HTTPGet
	case h.Sleep != 0:
		return "sleep " + h.Sleep.String()
	}
	return "none"
}

// Outcome is how a wait ended.
type Outcome string

const (
	// Released: the gate server said the pod may stop (its Verdict says
	// why: drained, its own deadline, no routes…).
	Released Outcome = "released"
	// Deadline: MaxWait passed before the server released the pod.
	Deadline Outcome = "deadline"
	// NoServer: no gate server answered within Fallback.
	NoServer Outcome = "no-server"
	// Refused: the server refused the request (a 4xx, or 404 several
	// times), so the agent stopped asking and waited out Fallback.
	Refused Outcome = "refused"
	// Invalid: the configuration could not make a valid request, so the
	// agent did not wait at all.
	Invalid Outcome = "invalid"
	// Canceled: the caller's context ended the wait.
	Canceled Outcome = "canceled"
)

// Result is what one Run did.
type Result struct {
	Outcome Outcome
	// Verdict is the last verdict the server sent with a 200; nil if none.
	Verdict *api.Verdict
	// Waited is the time from the start to the end of the wait, before the
	// hook.
	Waited time.Duration
	// Asks counts requests sent to the server.
	Asks int
	// HookRan tells whether the original hook was started; HookErr is its
	// failure, if any (logged, never changing the agent's exit code).
	HookRan bool
	HookErr error
}
