package prestop

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/proving/testutil"
)

// The tests that wait run in a synctest bubble on the in-memory network
// (see memNet): time is fake, so every bound below is exact, and a wait
// costs nothing.

func TestReleasedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply { return released(api.ReasonDrained) })
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.Then = h.hook()
		res := Run(context.Background(), cfg)

		if res.Outcome != Released || res.Asks != 1 || res.Verdict == nil || res.Verdict.Reason != api.ReasonDrained {
			t.Fatalf("got %+v, want released after one ask", res)
		}
		if res.Waited != 0 {
			t.Errorf("waited %s for a released pod, want no pause at all", res.Waited)
		}
		asks := g.recorded()
		want := api.DrainRequest{Namespace: "shop", Pod: "web-0", UID: testUID}
		if asks[0].req != want {
			t.Errorf("asked %+v, want %+v (the first ask waits for nothing)", asks[0].req, want)
		}
		if hit := h.only(t); hit.Before(asks[0].at) {
			t.Error("hook ran before the gate was asked")
		}
		if !res.HookRan || res.HookErr != nil {
			t.Errorf("hook: ran %v, err %v", res.HookRan, res.HookErr)
		}
		mustContain(t, log.String(),
			"draingate-prestop: released after ",
			": drained (routes: endpointslice/web-x7k2p closed)",
			"running original hook: http-get "+h.URL+"/shutdown",
			"original hook done after ")
	})
}

func TestReleasedAfterLongPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const polls = 3
		g := newGate(t, func(n int, _ api.DrainRequest) reply {
			if n == polls {
				return released(api.ReasonDrained)
			}
			return waiting(true)
		})
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.Then = h.hook()
		res := Run(context.Background(), cfg)

		if res.Outcome != Released || res.Asks != polls+1 {
			t.Fatalf("got %+v, want released at ask %d", res, polls+1)
		}
		asks := g.recorded()
		for i, a := range asks[1:] {
			if a.req.Wait <= 0 || a.req.Wait > cfg.PollWait {
				t.Errorf("long-poll %d asked to wait %s, want (0, %s]", i+1, a.req.Wait, cfg.PollWait)
			}
		}
		if h.only(t).Before(asks[polls].at) {
			t.Error("hook ran before the releasing answer was asked for")
		}
		// The same waiting verdict three times is one log line.
		if n := strings.Count(log.String(), "waiting after"); n != 1 {
			t.Errorf("%d waiting lines, want 1:\n%s", n, log.String())
		}
		mustContain(t, log.String(), "not released yet (routes: endpointslice/web-x7k2p closed, targetgroup/tg-other ignored, targetgroup/tg-web draining)")
	})
}

// With a token file, every ask shows the token read afresh (the kubelet
// renews it); a file that cannot be read is said once, and the agent asks
// without.
func TestTokenFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte("tok-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		g := newGate(t, func(n int, _ api.DrainRequest) reply {
			switch n {
			case 0:
				os.WriteFile(file, []byte("tok-2"), 0o600)
			case 1:
				os.WriteFile(file, []byte("tok 3"), 0o600)
			case 2:
				os.Remove(file)
			case 4:
				return released(api.ReasonDrained)
			}
			return waiting(true)
		})
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.TokenFile = file
		if res := Run(context.Background(), cfg); res.Outcome != Released {
			t.Fatalf("got %+v", res)
		}
		var got []string
		for _, a := range g.recorded() {
			got = append(got, a.auth)
		}
		if want := []string{"Bearer tok-1", "Bearer tok-2", "", "", ""}; !slices.Equal(got, want) {
			t.Errorf("Authorization headers %q, want %q", got, want)
		}
		if n := strings.Count(log.String(), "not sending the pod's token"); n != 1 {
			t.Errorf("%d lines about the token, want 1:\n%s", n, log.String())
		}
		mustContain(t, log.String(), "holds a character a token has not")
	})
}

func TestDeadlineReached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply { return waiting(true) })
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.MaxWait, cfg.PollWait = 1200*time.Millisecond, 300*time.Millisecond
		cfg.Then = h.hook()
		before := time.Now()
		res := Run(context.Background(), cfg)
		returned := time.Now()

		if res.Outcome != Deadline {
			t.Fatalf("outcome %s, want %s", res.Outcome, Deadline)
		}
		deadline := before.Add(cfg.MaxWait)
		if hit := h.only(t); hit.Before(deadline) {
			t.Errorf("hook ran %s before the deadline", deadline.Sub(hit))
		}
		if returned.After(deadline) {
			t.Errorf("returned %s after the deadline", returned.Sub(deadline))
		}
		for _, a := range g.recorded() {
			if a.at.Add(a.req.Wait).After(deadline) {
				t.Errorf("an ask at +%s asked to wait %s, past the deadline", a.at.Sub(before), a.req.Wait)
			}
		}
		mustContain(t, log.String(), "deadline reached after", "last verdict: not released yet (routes: endpointslice/web-x7k2p closed, targetgroup/tg-other ignored, targetgroup/tg-web draining)",
			"; open: targetgroup/tg-web: the target is draining; a source sent after the tail's end")
		if strings.Contains(log.String(), "closed long ago") || strings.Contains(log.String(), "never registered") {
			t.Error("the deadline line details a closed or ignored route")
		}
	})
}

func TestServerErrorsThenRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		replies := []reply{
			{status: 503, body: "caches not synced yet"},
			{status: 429, body: "slow down"},
			{status: 200, body: "<html>a proxy's page</html>"},
			{status: 500, verdict: &api.Verdict{Message: "informer broke"}},
			released(api.ReasonNoRoutes),
		}
		g := newGate(t, func(n int, _ api.DrainRequest) reply { return replies[n] })
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.Fallback = 0 // the server answers, so the fallback must play no part
		cfg.Then = h.hook()
		res := Run(context.Background(), cfg)

		if res.Outcome != Released || res.Asks != len(replies) {
			t.Fatalf("got %+v, want released after %d asks", res, len(replies))
		}
		asks := g.recorded()
		if h.only(t).Before(asks[len(asks)-1].at) {
			t.Error("hook ran before the release")
		}
		mustContain(t, log.String(),
			"gate server answered 503 caches not synced yet; retrying until the deadline",
			"gate server answered 429 slow down",
			"gate server answered 200 with no verdict",
			"gate server answered 500 informer broke",
			"released after", "no-routes (routes: endpointslice/web-x7k2p closed)")
	})
}

func TestNoServerFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(closedPort(t), &log)
		cfg.MaxWait, cfg.Fallback = 10*time.Second, 500*time.Millisecond
		cfg.Then = h.hook()
		before := time.Now()
		res := Run(context.Background(), cfg)
		returned := time.Now()

		if res.Outcome != NoServer || res.Asks < 2 {
			t.Fatalf("got %+v, want no-server after several asks", res)
		}
		fallbackEnd := before.Add(cfg.Fallback)
		if hit := h.only(t); hit.Before(fallbackEnd) {
			t.Errorf("hook ran %s before the fallback ended", fallbackEnd.Sub(hit))
		}
		if returned.After(fallbackEnd) {
			t.Errorf("returned %s after the fallback ended: the fallback, not max-wait, bounds a wait nobody answers", returned.Sub(fallbackEnd))
		}
		l := log.String()
		mustContain(t, l, "gate server unreachable: ", "connection refused", "no gate server answered in", "waited fallback 500ms")
		if n := strings.Count(l, "retrying until the fallback"); n != 1 {
			t.Errorf("the same failure logged %d times, want once:\n%s", n, l)
		}
	})
}

// Once a gate has answered, losing it lengthens the wait to the deadline:
// the fallback is only for a gate that was never there.
func TestLostServerWaitsForDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(n int, _ api.DrainRequest) reply {
			if n == 0 {
				return waiting(false)
			}
			return reply{hangUp: true}
		})
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.MaxWait, cfg.Fallback = 1200*time.Millisecond, 100*time.Millisecond
		cfg.Then = h.hook()
		before := time.Now()
		res := Run(context.Background(), cfg)

		if res.Outcome != Deadline || res.Asks < 3 {
			t.Fatalf("got %+v, want deadline after several asks", res)
		}
		if hit := h.only(t); hit.Before(before.Add(cfg.MaxWait)) {
			t.Errorf("hook ran %s before the deadline", before.Add(cfg.MaxWait).Sub(hit))
		}
		mustContain(t, log.String(), "gate server did not answer: ", "retrying until the deadline", "deadline reached")
	})
}

func TestNotFoundRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(n int, _ api.DrainRequest) reply {
			if n < 2 {
				return reply{status: 404, verdict: &api.Verdict{Reason: api.ReasonNotFound, Message: "pod shop/web-0 not in cache"}}
			}
			return released(api.ReasonDrained)
		})
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		res := Run(context.Background(), cfg)
		if res.Outcome != Released || res.Asks != 3 {
			t.Fatalf("got %+v, want released at the third ask", res)
		}
		mustContain(t, log.String(), "does not know the pod (yet): pod shop/web-0 not in cache; retrying")
	})
}

func TestNotFoundGivesUpThenFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply { return reply{status: 404, body: "404 page not found\n"} })
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.Fallback = 700 * time.Millisecond
		cfg.Then = h.hook()
		before := time.Now()
		res := Run(context.Background(), cfg)

		if res.Outcome != Refused || res.Asks != notFoundTries {
			t.Fatalf("got %+v, want refused after %d asks", res, notFoundTries)
		}
		if hit := h.only(t); hit.Before(before.Add(cfg.Fallback)) {
			t.Errorf("hook ran before the fallback ended")
		}
		mustContain(t, log.String(), "does not know the pod after 5 asks: 404 page not found; not asking again")
	})
}

func TestBadRequestStopsAsking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply {
			return reply{status: 400, verdict: &api.Verdict{Message: "uid does not match the pod's"}}
		})
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.Fallback = 400 * time.Millisecond
		cfg.Then = h.hook()
		before := time.Now()
		res := Run(context.Background(), cfg)
		returned := time.Now()

		if res.Outcome != Refused || res.Asks != 1 {
			t.Fatalf("got %+v, want refused after one ask", res)
		}
		if hit := h.only(t); hit.Before(before.Add(cfg.Fallback)) {
			t.Error("hook ran before the fallback ended")
		}
		if returned.After(before.Add(cfg.Fallback)) {
			t.Errorf("a refused request waited %s past the fallback", returned.Sub(before.Add(cfg.Fallback)))
		}
		mustContain(t, log.String(), "gate server refused the request: 400 uid does not match the pod's; not asking again, waiting out the fallback")
	})
}

// TestTrafficRefusedAsksWithout: a server that refuses the request only
// over its traffic summary (a version that reads its parameters
// differently) is asked again at once without it, and the wait goes on to
// the server's verdict instead of ending in the fallback.
func TestTrafficRefusedAsksWithout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(n int, req api.DrainRequest) reply {
			switch {
			case req.Traffic != nil:
				return reply{status: 400, verdict: &api.Verdict{Message: "traffic: unknown field"}}
			case n < 2:
				return waiting(false)
			}
			return released(api.ReasonDrained)
		})
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.Fallback = 400 * time.Millisecond
		cfg.Traffic = func() *api.Traffic { return &api.Traffic{Watched: time.Second} }
		res := Run(context.Background(), cfg)

		if res.Outcome != Released {
			t.Fatalf("got %+v, want released by the server", res)
		}
		asks := g.recorded()
		if len(asks) < 2 || asks[0].req.Traffic == nil {
			t.Fatalf("asks %+v: want the first with its summary", asks)
		}
		for _, a := range asks[1:] {
			if a.req.Traffic != nil {
				t.Errorf("asked again with the summary the server refused: %+v", a.req)
			}
		}
		mustContain(t, log.String(), "refused the request with its traffic summary: 400 traffic: unknown field; asking again without it")
	})
}

// A gate that answers long-polls at once is asked at most every minPollGap.
func TestPacesEagerServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply { return waiting(false) })
		cfg := config(g.URL, nil)
		cfg.MaxWait = time.Second
		res := Run(context.Background(), cfg)
		if res.Outcome != Deadline {
			t.Fatalf("outcome %s", res.Outcome)
		}
		asks := g.recorded()
		if len(asks) < 3 {
			t.Fatalf("%d asks in %s, want a few", len(asks), cfg.MaxWait)
		}
		// The first ask waits for nothing and the second follows at once;
		// from then on, long-polls answered at once are paced.
		for i := 2; i < len(asks); i++ {
			if gap := asks[i].at.Sub(asks[i-1].at); gap < minPollGap {
				t.Errorf("ask %d came %s after the one before, want at least %s", i, gap, minPollGap)
			}
		}
	})
}

func TestInvalidConfigRunsHookAtOnce(t *testing.T) {
	g := newGate(t, func(int, api.DrainRequest) reply { return released(api.ReasonDrained) })
	h := newHookRecorder(t)
	var log testutil.SyncBuffer
	cfg := config(g.URL, &log)
	cfg.Pod = "" // the downward API env was not set
	cfg.Then = h.hook()
	res := Run(context.Background(), cfg)
	if res.Outcome != Invalid || res.Asks != 0 || len(g.recorded()) != 0 {
		t.Fatalf("got %+v, want invalid without asking", res)
	}
	h.only(t)
	mustContain(t, log.String(), `not waiting: pod name "" is not a valid pod name`)

	cfg = config("https://gate:8443", &log)
	if res := Run(context.Background(), cfg); res.Outcome != Invalid {
		t.Errorf("https server: outcome %s", res.Outcome)
	}
	mustContain(t, log.String(), "https is not supported")
}

func TestZeroMaxWaitOnlyRunsHook(t *testing.T) {
	g := newGate(t, func(int, api.DrainRequest) reply { return waiting(true) })
	h := newHookRecorder(t)
	cfg := config(g.URL, nil)
	cfg.MaxWait = 0
	cfg.Then = h.hook()
	res := Run(context.Background(), cfg)
	if res.Outcome != Deadline || res.Asks != 0 {
		t.Fatalf("got %+v, want deadline without asking", res)
	}
	h.only(t)
}

func TestCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply { return waiting(true) })
		h := newHookRecorder(t)
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		cfg.MaxWait, cfg.PollWait = time.Minute, time.Minute
		cfg.Then = h.hook()
		const after = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), after)
		defer cancel()
		before := time.Now()
		res := Run(ctx, cfg)
		if took := time.Since(before); res.Outcome != Canceled || took != after {
			t.Fatalf("got %+v after %s, want canceled at once, after %s", res, took, after)
		}
		if res.HookRan || h.count() != 0 {
			t.Error("the hook ran though the caller gave up")
		}
		mustContain(t, log.String(), "wait canceled after", "not run: context deadline exceeded")
	})
}

// The pauses between failed asks double from 250 ms to 5 s, each drawn from
// its upper half.
func TestBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials []time.Time
		saved := dial
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials = append(dials, time.Now())
			return saved(ctx, network, addr)
		}
		defer func() { dial = saved }()
		cfg := config(closedPort(t), nil)
		cfg.MaxWait, cfg.Fallback = time.Minute, 30*time.Second
		if res := Run(context.Background(), cfg); res.Outcome != NoServer || res.Asks != len(dials) {
			t.Fatalf("got %+v after %d dials", res, len(dials))
		}
		step, capped := 250*time.Millisecond, false
		// The last pause is cut short by the fallback's end.
		for i := 1; i < len(dials)-1; i++ {
			if gap := dials[i].Sub(dials[i-1]); gap < step/2 || gap > step {
				t.Errorf("pause %d: %s, want within [%s, %s]", i, gap, step/2, step)
			}
			capped = step == 5*time.Second
			step = min(2*step, 5*time.Second)
		}
		if !capped {
			t.Errorf("%d asks in %s: the pauses never reached the 5s cap", len(dials), cfg.Fallback)
		}
	})
}

// Jitter: agents failing together do not retry together.
func TestBackoffJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seen := map[time.Duration]bool{}
		for range 20 {
			// With no fallback the agent pauses once after its first failed
			// ask, then gives up: Waited is that one pause.
			cfg := config(closedPort(t), nil)
			cfg.Fallback = 0
			res := Run(context.Background(), cfg)
			if res.Outcome != NoServer || res.Asks != 1 {
				t.Fatalf("got %+v, want no-server after one ask", res)
			}
			seen[res.Waited] = true
		}
		if len(seen) < 5 {
			t.Errorf("only %d distinct first pauses in 20: no jitter", len(seen))
		}
	})
}
