package inject

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"draingate.dev/draingate/api"
)

// original is a container's preStop hook as the agent will run it.
type original struct {
	// then are the agent's arguments that name the hook, after its own
	// flags: "-- argv...", "--then-sleep D", "--then-http-get URL", or none.
	then []string
	// own is the hook's own time on top of the wait, for the grace period:
	// a sleep's length; exec and httpGet count as 0, their time comes out of
	// the shutdown budget as it did before injection.
	own time.Duration
	// warning is something the user should know although the hook maps.
	warning string
}

// translateHook maps container c's preStop hook onto the agent's command
// line. problem is non-empty when the agent cannot reproduce the hook
// faithfully, which keeps the whole pod as it is.
func translateHook(c *corev1.Container) (o original, problem string) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return original{}, ""
	}
	h := c.Lifecycle.PreStop
	if n := countActions(h); n != 1 {
		// The API server rejects such a pod; mutating it first could make it
		// acceptable, so leave it for validation to refuse.
		return original{}, fmt.Sprintf("container %q: its preStop hook has %d actions, want exactly one", c.Name, n)
	}
	switch {
	case h.Exec != nil:
		return execHook(c, h.Exec)
	case h.Sleep != nil:
		return sleepHook(c, h.Sleep)
	case h.HTTPGet != nil:
		return httpGetHook(c, h.HTTPGet)
	default:
		return tcpSocketHook(c, h.TCPSocket)
	}
}

func countActions(h *corev1.LifecycleHandler) int {
	n := 0
	for _, set := range []bool{h.Exec != nil, h.HTTPGet != nil, h.TCPSocket != nil, h.Sleep != nil} {
		if set {
			n++
		}
	}
	return n
}

func execHook(c *corev1.Container, e *corev1.ExecAction) (original, string) {
	if len(e.Command) == 0 {
		return original{}, fmt.Sprintf("container %q: its preStop exec hook has no command", c.Name)
	}
	if path.Base(e.Command[0]) == api.AgentFile {
		// Wrapping the agent in itself would wait twice; this pod was
		// injected by hand (or by an older injector without the annotation).
		return original{}, fmt.Sprintf("container %q: its preStop hook already runs %s; remove it, or label the pod %s=%s",
			c.Name, api.AgentFile, api.LabelInject, api.Disabled)
	}
	// After "--" the agent takes every argument as the hook's argv, so
	// arguments that look like flags, or another "--", survive untouched.
	then := append([]string{"--"}, e.Command...)
	return original{then: then}, ""
}

// maxSleepSecs bounds a sleep hook: ten years, far past any grace period,
// far below what a time.Duration holds (292 years).
const maxSleepSecs = 10 * 365 * 24 * 3600

func sleepHook(c *corev1.Container, s *corev1.SleepAction) (original, string) {
	if s.Seconds < 0 {
		return original{}, fmt.Sprintf("container %q: its preStop sleep of %d seconds is negative", c.Name, s.Seconds)
	}
	if s.Seconds > maxSleepSecs {
		// Longer than any grace period: in a Duration it would overflow.
		return original{}, fmt.Sprintf("container %q: its preStop sleep of %d seconds is longer than any grace period (at most %d)", c.Name, s.Seconds, maxSleepSecs)
	}
	d := time.Duration(s.Seconds) * time.Second
	return original{then: []string{"--then-sleep", d.String()}, own: d}, ""
}

func httpGetHook(c *corev1.Container, g *corev1.HTTPGetAction) (original, string) {
	const advice = "use an exec hook, or leave this container out with annotation " + api.AnnotationContainers
	scheme := strings.ToLower(string(g.Scheme))
	switch {
	case scheme != "" && scheme != "http":
		return original{}, fmt.Sprintf("container %q: its preStop httpGet uses scheme %s; the agent speaks plain http only: %s", c.Name, g.Scheme, advice)
	case len(g.HTTPHeaders) > 0:
		return original{}, fmt.Sprintf("container %q: its preStop httpGet sends headers the agent cannot send: %s", c.Name, advice)
	case g.Host != "":
		return original{}, fmt.Sprintf("container %q: its preStop httpGet sets host %s, which the kubelet calls from the node and the agent cannot: %s",
			c.Name, api.Quote(g.Host, maxQuoted), advice)
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return original{}, fmt.Sprintf("container %q: its preStop httpGet port: %v", c.Name, err)
	}
	u, err := hookURL(port, g.Path)
	if err != nil {
		return original{}, fmt.Sprintf("container %q: its preStop httpGet path %s: %v", c.Name, api.Quote(g.Path, maxQuoted), err)
	}
	return original{then: []string{"--then-http-get", u}}, ""
}

// resolvePort finds an httpGet port as the kubelet does
// (k8s.io/kubernetes/pkg/probe.ResolveContainerPort): a number, or the name
// of one of the container's own ports.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	port := -1
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		found := false
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("no port named %s among the container's ports", api.Quote(p.StrVal, maxQuoted))
		}
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("%d is not a port number", port)
	}
	return port, nil
}

// hookURL builds the URL the agent GETs, as the kubelet's formatURL does
// (a path that does not parse is passed along as a plain path), with the
// host the agent can reach: loopback, see docs/injection.md. The result must
// pass the agent's own URL check (internal/prestop's checkHTTPURL): on a flag
// it cannot read the agent skips its whole wait, so a URL it would refuse
// is an error here, not a surprise at termination.
func hookURL(port int, p string) (string, error) {
	u, err := url.Parse(p)
	if err != nil {
		u = &url.URL{Path: p}
	}
	u.Scheme = "http"
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := u.String()
	back, err := url.Parse(s)
	if err != nil || back.Scheme != "http" || back.Host != u.Host || back.Opaque != "" || back.User != nil {
		return "", fmt.Errorf("does not make an http://host:port/path URL the agent accepts")
	}
	return s, nil
}

func tcpSocketHook(c *corev1.Container, t *corev1.TCPSocketAction) (original, string) {
	if t.Host != "" {
		return original{}, fmt.Sprintf("container %q: its preStop tcpSocket sets host %s (Pod Security baseline forbids it); remove the hook, the kubelet never runs it",
			c.Name, api.Quote(t.Host, maxQuoted))
	}
	return original{warning: fmt.Sprintf("container %q: its preStop tcpSocket hook was dropped: the kubelet never runs tcpSocket hooks, draingate's wait replaces it", c.Name)}, ""
}
