package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"draingate.dev/draingate/api"
)

// agentPollWait is how long each simulated agent's long-poll asks the
// server to hold, as draingate-prestop's default --poll-wait.
const agentPollWait = 20 * time.Second

// measure starts the server, deletes the waiting pods, runs their agents,
// samples the steady window, takes the pods out of their routes and waits
// for the releases.
func (r *run) measure(ctx context.Context) (Result, error) {
	cfg := r.cfg
	res := Result{Pods: cfg.Pods, Waiters: cfg.Waiters, Services: cfg.Services, TargetGroups: len(r.arns),
		Namespaces: len(r.namespaces), DescribeBudget: serverRate, ServerEnv: cfg.ServerEnv}
	srv, err := r.startServer(ctx)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	res.Ready = srv.readyAfter
	r.progress("server ready after %s; deleting %d pods", res.Ready.Round(100*time.Millisecond), len(r.waiters))
	if err := r.deleteWaiters(ctx); err != nil {
		return res, err
	}
	ag := r.startAgents(ctx, srv.url)
	defer ag.stop()
	if err := poll(ctx, 2*time.Minute, func() bool { return ag.asked.Load() == int64(len(r.waiters)) }); err != nil {
		return res, fmt.Errorf("only %d of %d agents asked: %w", ag.asked.Load(), len(r.waiters), err)
	}
	// Their first asks start the target groups' polls: let them settle.
	time.Sleep(3 * time.Second)
	if err := r.steady(ctx, srv, ag, &res); err != nil {
		return res, err
	}

	r.progress("taking the waiting pods out of their routes")
	changed, err := r.changeRoutes(ctx)
	if err != nil {
		return res, err
	}
	_ = poll(ctx, cfg.ReleaseTimeout, func() bool { return ag.count() == len(r.waiters) })
	r.tallyReleases(&res, ag.snapshot(), changed)
	res.AgentErrors += int(ag.errors.Load())
	// The shared route memory's Lease writes so far, all waiters released
	// (the deletes come when the pods go, after the run).
	res.LeaseWrites, _ = srv.metricSum(ctx, "draingate_ledger_writes_total")
	for action, n := range r.emu.CallsBy()[accessKey] {
		if action != "DescribeTargetHealth" {
			res.OtherCalls += n
		}
	}
	if err := srv.exitedEarly(); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// steady measures the steady window, every agent waiting: the server's
// CPU, memory and ELBv2 describe rate over cfg.Steady, the latency of
// sampled asks answered at once, and a heap profile at its end.
func (r *run) steady(ctx context.Context, srv *server, ag *agents, res *Result) error {
	cfg := r.cfg
	cpu0, err := srv.cpuSeconds()
	if err != nil {
		return err
	}
	calls0 := r.describeCalls()
	t0 := time.Now()
	r.progress("every agent waits; measuring for %s", cfg.Steady)
	lat, sampleErrs := r.sample(ctx, srv.url, cfg.Steady)
	el := time.Since(t0)
	cpu1, err := srv.cpuSeconds()
	if err != nil {
		return err
	}
	res.Window = el
	res.CPU = (cpu1 - cpu0) / el.Seconds()
	res.DescribePerSecond = float64(r.describeCalls()-calls0) / el.Seconds()
	if res.RSS, res.PeakRSS, err = srv.memory(); err != nil {
		return err
	}
	res.HeapInuse, _ = srv.metric(ctx, "go_memstats_heap_inuse_bytes")
	res.StackInuse, _ = srv.metric(ctx, "go_memstats_stack_inuse_bytes")
	res.HeapProfile = filepath.Join(r.env.Dir, fmt.Sprintf("heap-%d-%d.pb.gz", cfg.Pods, cfg.Waiters))
	if err := srv.saveHeapProfile(ctx, res.HeapProfile); err != nil {
		return err
	}
	if len(lat) == 0 {
		return fmt.Errorf("no answer to %d samples: %v", sampleErrs, ag.lastErr())
	}
	slices.Sort(lat)
	res.Answers, res.AnswerP50, res.AnswerP99 = len(lat), quantile(lat, 0.5), quantile(lat, 0.99)
	res.AgentErrors = sampleErrs
	return nil
}

// tallyReleases sets each waiting pod's release against the time its routes
// changed: missing, early (before the change, a bug: a few of their
// messages are kept) or after it, with the quantiles of the delays, apart
// for pods behind a target group and those in EndpointSlices only.
func (r *run) tallyReleases(res *Result, released map[int]release, changed map[int]time.Time) {
	var rel, tg, sliceOnly []time.Duration
	for _, i := range r.waiters {
		got, ok := released[i]
		switch {
		case !ok:
			res.Unreleased++
		case got.at.Before(changed[i]):
			res.Early++
			if len(res.EarlyVerdicts) < 5 {
				res.EarlyVerdicts = append(res.EarlyVerdicts, fmt.Sprintf("%s/%s, %s before its route change: %s",
					r.pods[i].ns, r.pods[i].name, changed[i].Sub(got.at), got.message))
			}
		default:
			d := got.at.Sub(changed[i])
			rel = append(rel, d)
			if _, ok := r.arns[r.pods[i].svc]; ok {
				tg = append(tg, d)
			} else {
				sliceOnly = append(sliceOnly, d)
			}
		}
	}
	slices.Sort(rel)
	slices.Sort(tg)
	slices.Sort(sliceOnly)
	res.TargetGroupReleased = len(tg)
	res.TargetGroupReleaseP50, res.TargetGroupReleaseP99 = quantile(tg, 0.5), quantile(tg, 0.99)
	res.SliceOnlyP50, res.SliceOnlyP99 = quantile(sliceOnly, 0.5), quantile(sliceOnly, 0.99)
	res.Released = len(rel) + res.Early
	res.ReleaseP50, res.ReleaseP99 = quantile(rel, 0.5), quantile(rel, 0.99)
	if len(rel) > 0 {
		res.ReleaseMax = rel[len(rel)-1]
	}
}

func (r *run) describeCalls() int { return r.emu.CallsBy()[accessKey]["DescribeTargetHealth"] }

// sample asks about a random waiting pod with no wait, every SampleEvery
// for d, and returns the latencies of the 200 answers and the number of
// other outcomes.
func (r *run) sample(ctx context.Context, url string, d time.Duration) (lat []time.Duration, errs int) {
	client := loopbackClient(net.IPv4(127, 2, 0, 1))
	defer client.CloseIdleConnections()
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 7))
	tick := time.NewTicker(r.cfg.SampleEvery)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return lat, errs
		case <-tick.C:
		}
		p := r.pods[r.waiters[rng.IntN(len(r.waiters))]]
		req := api.DrainRequest{Namespace: p.ns, Pod: p.name, UID: string(p.uid)}
		t0 := time.Now()
		status, _, err := get(ctx, client, req.URL(url))
		if err != nil || status != http.StatusOK {
			errs++
			continue
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, errs
}

// agents are the simulated draingate-prestop agents, one per waiting pod.
// release is one agent's release: when it was answered, and its message.
type release struct {
	at      time.Time
	message string
}

type agents struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	asked  atomic.Int64
	errors atomic.Int64

	mu       sync.Mutex
	released map[int]release // by pod index
	err      error           // the latest failure, for messages
}

// startAgents runs one agent per waiting pod, each asking from its own
// loopback address (127.1.x.y) as each real agent asks from its own pod.
func (r *run) startAgents(ctx context.Context, url string) *agents {
	ctx, cancel := context.WithCancel(ctx)
	a := &agents{cancel: cancel, released: map[int]release{}}
	for k, i := range r.waiters {
		p := r.pods[i]
		client := loopbackClient(net.IPv4(127, 1, byte(k/250), byte(k%250+1)))
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer client.CloseIdleConnections()
			first := true
			for ctx.Err() == nil {
				req := api.DrainRequest{Namespace: p.ns, Pod: p.name, UID: string(p.uid), Wait: agentPollWait}
				if first {
					a.asked.Add(1)
					first = false
				}
				status, body, err := get(ctx, client, req.URL(url))
				if ctx.Err() != nil {
					return
				}
				var v api.Verdict
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("wait API answered %d: %s", status, bytes.TrimSpace(body))
				}
				if err == nil {
					err = json.Unmarshal(body, &v)
				}
				if err != nil {
					a.errors.Add(1)
					a.mu.Lock()
					a.err = err
					a.mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
					continue
				}
				if v.Released {
					a.mu.Lock()
					a.released[i] = release{at: time.Now(), message: v.Message}
					a.mu.Unlock()
					return
				}
			}
		}()
	}
	return a
}

func (a *agents) stop() { a.cancel(); a.wg.Wait() }

func (a *agents) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.released)
}

func (a *agents) snapshot() map[int]release {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[int]release, len(a.released))
	for k, v := range a.released {
		out[k] = v
	}
	return out
}

func (a *agents) lastErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// loopbackClient dials from one loopback address (all of 127.0.0.0/8 is
// the host's own on Linux).
func loopbackClient(ip net.IP) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, Proxy: nil}}
}

func get(ctx context.Context, c *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b, err
}

// server is the draingate process under measurement.
type server struct {
	cmd        *exec.Cmd
	url        string
	metrics    string
	log        string
	readyAfter time.Duration
	done       chan struct{}
	waitErr    error
	stopped    bool
}

// startServer runs `draingate serve` at its defaults but for the tails
// (zero for EndpointSlices and ALBs: the release follows the route change
// by the server's own latency) and the wait API's sources (any: see the
// package comment), and waits until it is ready.
func (r *run) startServer(ctx context.Context) (*server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &server{
		url:     "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		metrics: "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics",
		log:     filepath.Join(r.env.Dir, fmt.Sprintf("server-%d-%d.log", r.cfg.Pods, r.cfg.Waiters)),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(r.env.Server, "serve",
		"--kubeconfig", r.env.Kubeconfig,
		"--listen", "127.0.0.1:"+strconv.Itoa(ports[0]), "--metrics-listen", "127.0.0.1:"+strconv.Itoa(ports[1]),
		"--elbv2-endpoint", r.emuURL, "--aws-region", "us-east-1", "--aws-rate", strconv.FormatFloat(serverRate, 'g', -1, 64),
		"--wait-api-sources", "any", "--tail-endpointslice", "0", "--tail-alb", "0", "--log-format", "json", "--profiling",
		"--namespace", r.namespaces[0])
	s.cmd.Env = []string{"AWS_ACCESS_KEY_ID=" + accessKey, "AWS_SECRET_ACCESS_KEY=scale", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "HOME=/nonexistent"}
	s.cmd.Env = append(s.cmd.Env, r.cfg.ServerEnv...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// The server dies with the benchmark, whatever ends it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	err = poll(ctx, 3*time.Minute, func() bool {
		select {
		case <-s.done:
			return true
		default:
		}
		status, _, err := get(ctx, http.DefaultClient, s.url+"/readyz")
		return err == nil && status == http.StatusOK
	})
	if err == nil {
		err = s.exitedEarly()
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("draingate serve not ready (log %s): %w", s.log, err)
	}
	s.readyAfter = time.Since(start)
	return s, nil
}

// exitedEarly says whether the server exited before stop.
func (s *server) exitedEarly() error {
	select {
	case <-s.done:
		if !s.stopped {
			return fmt.Errorf("draingate serve exited: %v (log %s)", s.waitErr, s.log)
		}
	default:
	}
	return nil
}

// stop ends the server by its PID: SIGTERM, then SIGKILL after 15 s.
func (s *server) stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the user and system CPU time the server used so far.
func (s *server) cpuSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which may hold spaces: state is
	// field 3, utime 14, stime 15.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", b)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTicks, nil
}

// memory is the server's resident memory now and its high-water mark.
func (s *server) memory() (rss, peak uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc status %s: %w", k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, errors.New("no VmRSS or VmHWM in /proc status")
	}
	return rss, peak, sc.Err()
}

// metric reads one unlabelled gauge from the server's metrics.
func (s *server) metric(ctx context.Context, name string) (uint64, error) {
	status, body, err := get(ctx, http.DefaultClient, s.metrics)
	if err != nil || status != http.StatusOK {
		return 0, fmt.Errorf("metrics: %d %v", status, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return uint64(f), err
		}
	}
	return 0, fmt.Errorf("no %s in the metrics", name)
}

// metricSum adds up every series of one metric (its labels whatever
// they are) from the server's metrics.
func (s *server) metricSum(ctx context.Context, name string) (int, error) {
	status, body, err := get(ctx, http.DefaultClient, s.metrics)
	if err != nil || status != http.StatusOK {
		return 0, fmt.Errorf("metrics: %d %v", status, err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndex(rest, " ")+1:]), 64)
			if err != nil {
				return 0, err
			}
			sum += f
		}
	}
	return int(sum), nil
}

// saveHeapProfile writes the server's heap profile (its live objects
// after a collection) to path, for go tool pprof.
func (s *server) saveHeapProfile(ctx context.Context, path string) error {
	status, body, err := get(ctx, http.DefaultClient, strings.TrimSuffix(s.metrics, "/metrics")+"/debug/pprof/heap?gc=1")
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("answered %d", status)
	}
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return os.WriteFile(path, body, 0o644)
}

// freePorts finds n free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
