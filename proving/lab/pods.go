package lab

import (
	"bufio"
	"context"
	"io"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/proving/lab/report"
)

// podRecord is what the lab learns of one pod's end. SIGTERM and exit come
// from the demo app's own log lines (node clock, which is this host's).
type podRecord struct {
	name, ip    string
	deletedAt   time.Time // first seen with a deletionTimestamp
	restarted   time.Time // first seen with its app container restarted
	failedProbe time.Time // the app's first failed liveness probe
	sigterm     time.Time
	exit        time.Time
	// grace is the pod's terminationGracePeriodSeconds as created: what
	// the injection webhook gave it (a preStop agent's max-wait included).
	grace time.Duration
	// sized is the webhook's draingate.dev/max-wait-sized annotation:
	// the pod's max-wait and why it is not the configured one.
	sized      string
	release    string    // how the agent let the pod go (releaseReason), "" without one
	releasedAt time.Time // when the lab read the agent's closing line
	closes     report.Closes
	agentLines []string // the agent's release line and what it said of its traffic evidence
	// sources counts every request the app received per source address
	// (its "source" lines).
	sources   map[string]int
	following bool
	// logLost: the pod was gone before its log could be read to the end
	// (an API server outage cut the stream); its exit is not known.
	logLost bool
}

// tracker watches a namespace's pods and follows each app container's log.
type tracker struct {
	cl kubernetes.Interface
	ns string

	mu   sync.Mutex
	pods map[string]*podRecord
}

func newTracker(cl kubernetes.Interface, ns string) *tracker {
	return &tracker{cl: cl, ns: ns, pods: map[string]*podRecord{}}
}

func (t *tracker) run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(t.cl, 0, informers.WithNamespace(t.ns))
	inf := f.Core().V1().Pods().Informer()
	handle := func(o any) {
		p, ok := o.(*corev1.Pod)
		if ok {
			t.observe(ctx, p)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	go func() { <-ctx.Done(); f.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	return nil
}

func (t *tracker) observe(ctx context.Context, p *corev1.Pod) {
	if p.Labels["app"] != appName {
		return // the in-cluster client: not the app
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.pods[p.Name]
	if r == nil {
		r = &podRecord{name: p.Name}
		t.pods[p.Name] = r
	}
	if r.ip == "" {
		r.ip = p.Status.PodIP
	}
	if v := p.Annotations[api.AnnotationMaxWaitSized]; v != "" {
		r.sized = v
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		r.grace = time.Duration(*g) * time.Second
	}
	if p.DeletionTimestamp != nil && r.deletedAt.IsZero() {
		r.deletedAt = now
	}
	running := false
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" && cs.State.Running != nil {
			running = true
		}
		if cs.Name == "app" && cs.RestartCount > 0 && r.restarted.IsZero() {
			r.restarted = now
		}
	}
	if running && !r.following {
		r.following = true
		go t.follow(ctx, p.Name)
	}
}

// follow reads the app's log until its first container ends, keeping its
// "sigterm <ns>", "exit <ns>", "liveness-failed <ns>" and
// "source <ip> <total> <after-sigterm>" lines and the agent's last word on
// why it let the pod go (the injected agent writes its lines there too).
//
// A stream cut before the exit line (the API server restarted) is opened
// again, from the log's start, until the exit line is read or the pod is
// gone (then its record says logLost).
func (t *tracker) follow(ctx context.Context, pod string) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 && !t.reopenable(ctx, pod) {
			return
		}
		rc, err := t.cl.CoreV1().Pods(t.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app", Follow: true}).Stream(ctx)
		if err != nil {
			continue
		}
		t.readLog(pod, rc)
		rc.Close()
		t.mu.Lock()
		done := !t.pods[pod].exit.IsZero()
		t.mu.Unlock()
		if done {
			return
		}
	}
}

// reopenable pauses a second before pod's log is opened again, and reports
// whether that is still worth it: not once ctx has ended, nor once the pod
// is gone, whose record then says logLost.
func (t *tracker) reopenable(ctx context.Context, pod string) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Second):
	}
	if _, err := t.cl.CoreV1().Pods(t.ns).Get(ctx, pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.mu.Lock()
		t.pods[pod].logLost = true
		t.mu.Unlock()
		return false
	}
	return true
}

// readLog reads one stream of pod's log to its end, a line at a time.
func (t *tracker) readLog(pod string, log io.Reader) {
	// The log is read again from its start: what is counted from it
	// starts again too.
	t.mu.Lock()
	t.pods[pod].sources, t.pods[pod].agentLines = nil, nil
	t.mu.Unlock()
	sc := bufio.NewScanner(log)
	for sc.Scan() {
		t.readLine(pod, sc.Text())
	}
}

// readLine keeps in pod's record what one line of its log says: the
// agent's traffic evidence and release lines, the app's per-source counts
// and its timestamped sigterm, exit and liveness-failed lines. Other lines
// are ignored.
func (t *tracker) readLine(pod, line string) {
	if strings.HasPrefix(line, "draingate-prestop: traffic evidence") {
		t.mu.Lock()
		t.pods[pod].agentLines = append(t.pods[pod].agentLines, line)
		t.mu.Unlock()
		return
	}
	if why, ok := releaseReason(line); ok {
		t.mu.Lock()
		if t.pods[pod].release == "" {
			t.pods[pod].releasedAt = time.Now()
		}
		t.pods[pod].release = why
		t.pods[pod].closes = targetGroupCloses(line)
		t.pods[pod].agentLines = append(t.pods[pod].agentLines, line)
		t.mu.Unlock()
		return
	}
	f := strings.Fields(line)
	if len(f) == 4 && f[0] == "source" {
		if total, err := strconv.Atoi(f[2]); err == nil {
			t.mu.Lock()
			r := t.pods[pod]
			if r.sources == nil {
				r.sources = map[string]int{}
			}
			r.sources[f[1]] += total
			t.mu.Unlock()
		}
		return
	}
	if len(f) != 2 {
		return
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return
	}
	t.mu.Lock()
	switch f[0] {
	case "sigterm":
		t.pods[pod].sigterm = time.Unix(0, ns)
	case "exit":
		t.pods[pod].exit = time.Unix(0, ns)
	case "liveness-failed":
		t.pods[pod].failedProbe = time.Unix(0, ns)
	}
	t.mu.Unlock()
}

// snapshot copies the records.
func (t *tracker) snapshot() []podRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]podRecord, 0, len(t.pods))
	for _, r := range t.pods {
		c := *r
		c.sources = maps.Clone(r.sources)
		out = append(out, c)
	}
	return out
}

// exitPending counts pods deleted or restarted whose app has not logged its
// (first container's) exit.
// allDeleted reports whether the tracker saw every one of pods deleted.
func (t *tracker) allDeleted(pods []corev1.Pod) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range pods {
		if r := t.pods[p.Name]; r == nil || r.deletedAt.IsZero() {
			return false
		}
	}
	return true
}

// longestGrace is the longest grace period of the pods seen (zero without
// any): how long the kubelet may take to stop one of them, its preStop
// hook included.
func (t *tracker) longestGrace() time.Duration {
	var g time.Duration
	for _, r := range t.snapshot() {
		g = max(g, r.grace)
	}
	return g
}

func (t *tracker) exitPending() int {
	n := 0
	for _, r := range t.snapshot() {
		if (!r.deletedAt.IsZero() || !r.restarted.IsZero()) && r.exit.IsZero() && !r.logLost {
			n++
		}
	}
	return n
}

// restartedAt says whether pod's app container has restarted.
func (t *tracker) restartedAt(pod string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.pods[pod]
	return r != nil && !r.restarted.IsZero()
}

// The gate's release message says how each target group route closed
// (internal/evidence: Closing.Why): "targetgroup/ARN by quiet 7.5s after 28
// arrivals from 3 sources (3 fitted at 2.1-3.4/s, bound 7.1s), 10.4s before
// its tail's end, 12 arrivals from the node not counted, 3 of unknown source
// (too short to see) not counted as a source" (an NLB route counts "new
// connections"), or "targetgroup/ARN by its ALB tail (20s)".
var (
	quietSources = regexp.MustCompile(`^\S+ by quiet \S+ after \d+ (?:arrivals|new connections) from (\d+) sources?`)
	quietFit     = regexp.MustCompile(`fitted at ([^,]+), (?:longest quiet )?bound ([0-9.hmsµ]+)`)
	fromNode     = regexp.MustCompile(`(\d+) arrivals from the node not counted`)
	unknownSrc   = regexp.MustCompile(`(\d+) of unknown source`)
)

// targetGroupCloses reads, from the agent's release line, what closed the
// pod's target group routes.
func targetGroupCloses(line string) report.Closes {
	var c report.Closes
	chunks := strings.Split(line, "targetgroup/")
	for _, ch := range chunks[1:] {
		if m := fromNode.FindStringSubmatch(ch); m != nil {
			n, _ := strconv.Atoi(m[1])
			c.NodeArrivals += n
		}
		if m := unknownSrc.FindStringSubmatch(ch); m != nil {
			n, _ := strconv.Atoi(m[1])
			c.Unknown += n
		}
		m := quietSources.FindStringSubmatch(ch)
		if m == nil {
			if name, _, _ := strings.Cut(ch, " "); strings.HasPrefix(ch[len(name):], " by its ") {
				c.Tail++
			}
			continue
		}
		c.Traffic++
		if strings.Contains(ch, "before its tail's end") {
			c.Early++
		}
		n, _ := strconv.Atoi(m[1])
		c.Sources = max(c.Sources, n)
		if f := quietFit.FindStringSubmatch(ch); f != nil {
			c.Rates = f[1]
			if d, err := time.ParseDuration(f[2]); err == nil {
				c.Bound = max(c.Bound, d)
			}
		}
	}
	return c
}

// releaseReason reads one of the agent's closing log lines (internal/prestop)
// and says how it let the pod go: the gate's release reason ("drained",
// "no-routes", "deadline" for the server's deadline), "max-wait" (the
// agent's own deadline), "fallback" (no gate server answered), "refused"
// (the server refused the request), "canceled" or "invalid". Other lines
// are not closing lines.
func releaseReason(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "draingate-prestop: ")
	if !ok {
		return "", false
	}
	switch {
	case strings.HasPrefix(rest, "released after "):
		_, verdict, _ := strings.Cut(rest, ": ")
		reason, _, _ := strings.Cut(verdict, " ")
		return reason, reason != ""
	case strings.HasPrefix(rest, "deadline reached after "):
		return "max-wait", true
	case strings.HasPrefix(rest, "no gate server answered "):
		return "fallback", true
	case strings.Contains(rest, "; not asking again"):
		return "refused", true
	case strings.HasPrefix(rest, "wait canceled "):
		return "canceled", true
	case strings.HasPrefix(rest, "not waiting: "):
		return "invalid", true
	}
	return "", false
}
