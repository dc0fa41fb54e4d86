package prestop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/backoff"
)

// retry paces failed asks: doubling from 250 ms to 5 s, each pause drawn
// from its upper half so that the pods of one rollout do not ask a
// recovering server in lockstep.
var retry = backoff.Policy{Min: 250 * time.Millisecond, Max: 5 * time.Second}

const (
	// answerSlack is how much longer than the wait it asked for the agent
	// gives the server to answer before it calls the ask lost.
	answerSlack = 5 * time.Second
	// minPollGap paces asks when a server answers a long-poll at once (one
	// that caps wait to nothing, or an old one): at most four asks a second.
	minPollGap = 250 * time.Millisecond
	// notFoundTries is how many 404s in a row the agent takes: the
	// server's cache may be a moment behind, but not for seconds.
	notFoundTries = 5
)

// Run waits until the gate server releases the pod, or until cfg.MaxWait
// has passed since the call, or, when no gate server answers, until
// cfg.Fallback has passed; then it runs cfg.Then. It always returns, and
// logs one line per decision to cfg.Out.
func Run(ctx context.Context, cfg Config) Result {
	start := time.Now()
	if cfg.PollWait == 0 {
		cfg.PollWait = DefaultPollWait
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	log := logger{cfg.Out}
	var res Result
	if err := cfg.Validate(); err != nil {
		// Without a valid request there is nobody to ask and no deadline to
		// trust; Kubernetes' own behaviour (hook, then SIGTERM) is the safe
		// side.
		log.printf("not waiting: %s", api.OneLine(err.Error()))
		res.Outcome = Invalid
	} else {
		w := &waiter{cfg: cfg, log: log, start: start}
		w.run(ctx)
		res = w.res
	}
	res.Waited = time.Since(start)
	res.HookRan, res.HookErr = runHook(ctx, cfg.Then, cfg.Out, log)
	return res
}

type waiter struct {
	cfg   Config
	log   logger
	start time.Time
	res   Result

	// deadline is start plus MaxWait; fallbackEnd is when the wait ends if
	// no server has answered by then.
	deadline    time.Time
	fallbackEnd time.Time

	answered bool   // some HTTP answer came back, whatever its status
	failures int    // failed asks since the last good answer, for the backoff
	notFound int    // 404s in a row
	lastErr  string // the last failure logged, to log only changes
	lastSeen string // the last waiting verdict logged, likewise

	tokenFailed bool // reading the token file failed, and was logged
	// bare says the asks carry no traffic summary any more: a server
	// refused one that did (an older or newer server reading its
	// parameters differently), and a wait must not end over an optional
	// part of the request.
	bare bool
}

// run asks the server until one of the ends Run documents comes, and leaves
// in w.res which it was.
func (w *waiter) run(ctx context.Context) {
	cfg := w.cfg
	w.deadline = w.start.Add(cfg.MaxWait)
	w.fallbackEnd = w.start.Add(min(cfg.Fallback, cfg.MaxWait))
	req := api.DrainRequest{Namespace: cfg.Namespace, Pod: cfg.Pod, UID: cfg.UID}
	w.log.printf("asking %s whether %s/%s may stop: max wait %s, fallback %s", cfg.Server, cfg.Namespace, cfg.Pod, cfg.MaxWait, min(cfg.Fallback, cfg.MaxWait))
	for {
		now := time.Now()
		if w.over(ctx, now) {
			return
		}

		// Until a server has answered, ask for an answer at once and stop
		// trying when the fallback ends: a long-poll would hide whether
		// anybody is there. The first ask always gets its chance, so a
		// zero fallback still asks once.
		limit := w.deadline
		req.Wait = 0
		if !w.answered && w.res.Asks > 0 {
			limit = w.fallbackEnd
		}
		if w.answered {
			remaining := w.deadline.Sub(now)
			if remaining < minPollGap {
				// Too little time to be worth another round trip.
				sleepUntil(ctx, w.deadline)
				continue
			}
			// Ask the server to answer a little before the deadline, so the
			// last verdict arrives instead of being cut off.
			req.Wait = min(cfg.PollWait, remaining-min(time.Second, remaining/10)).Truncate(time.Millisecond)
		}
		// The evidence is taken afresh for every ask: the server weighs
		// it as of the moment it asks.
		req.Traffic = nil
		if cfg.Traffic != nil && !w.bare {
			req.Traffic = cfg.Traffic()
		}
		timeout := min(limit.Sub(now), req.Wait+answerSlack)
		resp, err := w.ask(ctx, req, timeout)
		w.res.Asks++
		if ctx.Err() != nil {
			continue
		}
		if err != nil {
			w.unanswered(ctx, err, limit)
			continue
		}
		w.answered = true
		if w.answer(ctx, resp, now, req) {
			return
		}
	}
}

// over reports whether the wait is over before the next ask: ctx ended,
// the deadline came, or the fallback ended with no server having answered.
// It sets the outcome and logs it.
func (w *waiter) over(ctx context.Context, now time.Time) bool {
	switch {
	case ctx.Err() != nil:
		w.res.Outcome = Canceled
		w.log.printf("wait canceled after %s: %v", w.since(), context.Cause(ctx))
		return true
	case !now.Before(w.deadline):
		w.res.Outcome = Deadline
		w.log.printf("deadline reached after %s, not released (%s)%s", w.since(), w.lastWord(), openDetails(w.res.Verdict))
		return true
	case !w.answered && w.res.Asks > 0 && !now.Before(w.fallbackEnd):
		w.res.Outcome = NoServer
		w.log.printf("no gate server answered in %s (%d asks, last error: %s); waited fallback %s", w.since(), w.res.Asks, w.lastErr, min(w.cfg.Fallback, w.cfg.MaxWait))
		return true
	}
	return false
}

// unanswered logs an ask that got no HTTP answer and pauses before the
// next, never past limit. Before any answer the wait is the fallback's, so
// the log line says when that ends.
func (w *waiter) unanswered(ctx context.Context, err error, limit time.Time) {
	if w.answered {
		w.failed(fmt.Sprintf("gate server did not answer: %v", err), "retrying until the deadline")
	} else {
		w.failed(fmt.Sprintf("gate server unreachable: %v", err), fmt.Sprintf("retrying until the fallback ends in %s", round(time.Until(w.fallbackEnd))))
	}
	w.pause(ctx, limit)
}

// answer acts on an HTTP answer to req, sent at now, and reports whether
// the wait is over (released, or refused and the fallback waited out). A
// refusal that may be about the traffic summary is retried at once
// without it; a 404 is retried a few times; other 4xx but 429 refuse; the
// rest is retried until the deadline.
func (w *waiter) answer(ctx context.Context, resp response, now time.Time, req api.DrainRequest) bool {
	switch s := resp.status; {
	case s == 200:
		return w.verdict(ctx, resp, now, req.Wait)
	case req.Traffic != nil && optionalRefused(s):
		// Only the request's optional part may be what the server cannot
		// read: ask again at once without it. The tails then decide,
		// which can only make the wait longer.
		w.bare = true
		w.log.printf("gate server refused the request with its traffic summary: %d %s; asking again without it (the gate server's version may differ from this agent's)",
			s, errorText(resp))
	case s == 404:
		w.notFound++
		if w.notFound >= notFoundTries {
			w.refused(ctx, w.fallbackEnd, fmt.Sprintf("gate server does not know the pod after %d asks: %s", w.notFound, errorText(resp)))
			return true
		}
		w.failed(fmt.Sprintf("gate server does not know the pod (yet): %s", errorText(resp)), "retrying: its cache may be behind")
		w.pause(ctx, w.deadline)
	case s >= 400 && s < 500 && s != 429:
		w.refused(ctx, w.fallbackEnd, fmt.Sprintf("gate server refused the request: %d %s", s, errorText(resp)))
		return true
	default:
		// 5xx, 429, and what a gate server never sends (3xx…): the
		// server is there but cannot answer now; errors lengthen the
		// wait, they never shorten it.
		w.failed(fmt.Sprintf("gate server answered %d %s", s, errorText(resp)), "retrying until the deadline")
		w.pause(ctx, w.deadline)
	}
	return false
}

// optionalRefused says whether a status may be about a request's optional
// part: malformed (400), or too large in its body, URL or headers (413,
// 414, 431).
func optionalRefused(status int) bool {
	switch status {
	case 400, 413, 414, 431:
		return true
	}
	return false
}

// verdict acts on a 200 answer, and reports whether it released the pod.
// A waiting verdict is logged when it changes; a long-poll answered at once
// is paced to minPollGap so a server that never holds one is not asked in
// a tight loop.
func (w *waiter) verdict(ctx context.Context, resp response, now time.Time, wait time.Duration) bool {
	var v api.Verdict
	if err := json.Unmarshal(resp.body, &v); err != nil {
		w.failed(fmt.Sprintf("gate server answered 200 with no verdict: %v", err), "retrying")
		w.pause(ctx, w.deadline)
		return false
	}
	w.res.Verdict = &v
	w.failures, w.notFound, w.lastErr = 0, 0, ""
	if v.Released {
		w.res.Outcome = Released
		w.log.printf("released after %s: %s", w.since(), summary(&v))
		return true
	}
	if seen := seenKey(&v); seen != w.lastSeen {
		w.lastSeen = seen
		w.log.printf("waiting after %s: %s", w.since(), summary(&v))
	}
	if took := time.Since(now); wait > 0 && took < minPollGap {
		sleepUntil(ctx, earlier(now.Add(minPollGap), w.deadline))
	}
	return false
}

// ask sends one drain request, bounded by timeout.
func (w *waiter) ask(ctx context.Context, req api.DrainRequest, timeout time.Duration) (response, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := httpGet(actx, req.URL(w.cfg.Server), true, w.authorization())
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %s", round(timeout))
	}
	return resp, err
}

// maxTokenSize bounds the token file read: a projected token is about a
// kilobyte.
const maxTokenSize = 16 << 10

// authorization is the header line that shows the pod's token, or "" when
// there is no token file or it cannot be read (said once: the server then
// answers as it can without).
func (w *waiter) authorization() string {
	if w.cfg.TokenFile == "" {
		return ""
	}
	tok, err := readToken(w.cfg.TokenFile)
	if err != nil {
		if !w.tokenFailed {
			w.tokenFailed = true
			w.log.printf("not sending the pod's token: %v", err)
		}
		return ""
	}
	return "Authorization: Bearer " + tok
}

// readToken reads a token file: one line of printable ASCII, at most
// maxTokenSize bytes.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenSize+1))
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxTokenSize:
		return "", fmt.Errorf("%s holds more than %d bytes", path, maxTokenSize)
	case tok == "":
		return "", fmt.Errorf("%s is empty", path)
	}
	for _, r := range tok {
		if r <= ' ' || r > '~' {
			return "", fmt.Errorf("%s holds a character a token has not (%q)", path, r)
		}
	}
	return tok, nil
}

// refused stops asking and waits out the fallback: the server cannot help
// with this request, so the bounded wait is the best left to give.
func (w *waiter) refused(ctx context.Context, fallbackEnd time.Time, why string) {
	w.res.Outcome = Refused
	left := time.Until(fallbackEnd)
	if left > 0 {
		w.log.printf("%s; not asking again, waiting out the fallback (%s more)", why, round(left))
		sleepUntil(ctx, fallbackEnd)
	} else {
		w.log.printf("%s; not asking again, fallback already over", why)
	}
}

// failed logs a failed ask unless it is the same failure as the last one:
// a server down for a minute should cost one line, not forty.
func (w *waiter) failed(what, then string) {
	if what != w.lastErr {
		w.log.printf("%s; %s", what, then)
	}
	w.lastErr = what
}

// pause sleeps one backoff step, never past limit.
func (w *waiter) pause(ctx context.Context, limit time.Time) {
	w.failures++
	sleepUntil(ctx, earlier(time.Now().Add(retry.Next(w.failures)), limit))
}

func (w *waiter) since() string { return round(time.Since(w.start)) }

// lastWord is what the agent last heard, for the deadline's log line.
func (w *waiter) lastWord() string {
	switch {
	case w.res.Verdict != nil && w.lastErr == "":
		return "last verdict: " + summary(w.res.Verdict)
	case w.res.Verdict != nil:
		return "last verdict: " + summary(w.res.Verdict) + "; then " + w.lastErr
	case w.lastErr != "":
		return w.lastErr
	}
	return "no answer yet"
}

// summary is a verdict as a log line fragment:
// "drained (routes: endpointslice/web-x closed, targetgroup/tg-web closed)".
func summary(v *api.Verdict) string {
	reason := string(v.Reason)
	switch {
	case reason != "":
	case v.Released:
		reason = "released"
	default:
		reason = "not released yet"
	}
	s := reason + " (" + routeList(v.Routes) + ")"
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}

// openDetails says, for a verdict that did not release, why each open
// route was open as the server put it: "; open: targetgroup/arn: the
// target is draining since ...". Closed routes and those the gate ignored
// (never the pod's) are left out. Empty without a verdict or details.
func openDetails(v *api.Verdict) string {
	if v == nil {
		return ""
	}
	var s string
	for _, r := range v.Routes {
		if r.State != "closed" && r.State != "ignored" && r.Detail != "" {
			s += "; open: " + r.Kind + "/" + r.Name + ": " + r.Detail
		}
	}
	return s
}

func routeList(rs []api.Route) string {
	if len(rs) == 0 {
		return "no routes"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return "routes: " + strings.Join(parts, ", ")
}

// seenKey is what makes a waiting verdict worth a new log line: a change of
// reason or of some route's state, not the passing of time.
func seenKey(v *api.Verdict) string { return string(v.Reason) + "|" + routeList(v.Routes) }

// errorText is the gist of an error answer: a verdict's message, else the
// body's first line.
func errorText(r response) string {
	var v api.Verdict
	if json.Unmarshal(r.body, &v) == nil && v.Message != "" {
		return api.Truncate(v.Message, 200)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(r.body)), "\n")
	if line == "" {
		return "(no body)"
	}
	return api.Truncate(line, 200)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// round keeps log lines readable: 12.3s, not 12.301234567s.
func round(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

type logger struct{ w io.Writer }

func (l logger) printf(format string, args ...any) {
	fmt.Fprintf(l.w, "draingate-prestop: "+format+"\n", args...)
}
