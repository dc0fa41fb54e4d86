package prestop

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/traffic"
)

// DefaultServer is the gate server's in-cluster address when neither
// --server nor DRAINGATE_SERVER says otherwise.
const DefaultServer = "http://draingate.draingate-system.svc:8080"

// waitFlags are the wait command's flags. Each also reads DRAINGATE_<NAME>
// (see internal/cli), so the webhook can configure the agent through env
// alone; a flag wins over its variable.
var waitFlags = []struct{ name, def, usage string }{
	{"server", DefaultServer, "gate server root URL (http:// only)"},
	{"max-wait", "90s", "longest wait for a release, from the start; the original hook runs after it"},
	{"fallback", "30s", "how long to keep trying when no gate server answers at all (within max-wait)"},
	{"poll-wait", DefaultPollWait.String(), "how long each long-poll asks the server to hold"},
	{"then-http-get", "", "original hook: GET this http:// URL after the wait"},
	{"then-sleep", "", "original hook: sleep this long after the wait"},
	{"pod-name", "", "this pod's name (downward API: metadata.name)"},
	{"pod-namespace", "", "this pod's namespace (downward API: metadata.namespace)"},
	{"pod-uid", "", "this pod's UID (downward API: metadata.uid)"},
	{"traffic-evidence", "true", "watch this pod's inbound TCP connections (its own sockets, every " + trafficInterval.String() +
		") and send a summary with each ask, so the server can see whether routes still bring requests; false, or a kernel that refuses, sends none and the server relies on route tails alone"},
	{"token-file", "", "a file holding a ServiceAccount token bound to this pod (audience draingate), read before every ask and sent as a bearer token; the injector sets it for hostNetwork pods, whose address (the node's) does not tell the server which pod asks"},
	{"watch-socket", "", "the pod's traffic watcher's socket (the watch sidecar the injector adds): its history, from the pod's start, is sent instead of this hook's own watch while it answers"},
	{"log", "", "also append the log lines to this file; /proc/1/fd/1 puts them in kubectl logs, since the kubelet drops a successful hook's output"},
}

// Main is the draingate-prestop command line; it returns the exit code.
// wait always returns 0; install returns 1 when it fails, so the init
// container that runs it fails loudly.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cli.Dispatch("draingate-prestop", usage(), map[string]func([]string) int{
		"wait": func(args []string) int {
			waitCommand(ctx, args, getenv, stdout)
			return 0
		},
		"install": func(args []string) int { return installCommand(args, stdout, stderr) },
		"watch":   func(args []string) int { return watchCommand(ctx, args, stdout, stderr) },
	}, args, stdout, stderr)
}

func installCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "draingate-prestop: install takes one argument, the directory to copy the agent into")
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "draingate-prestop: install: finding this executable: %v\n", err)
		return 1
	}
	dst, err := Install(exe, args[0])
	if err != nil {
		fmt.Fprintf(stderr, "draingate-prestop: install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "draingate-prestop: installed %s\n", dst)
	return 0
}

func usage() string {
	var w strings.Builder
	w.WriteString(`usage:
  draingate-prestop install DIR
      copy this executable to DIR/draingate-prestop (an init container's job)
  draingate-prestop watch --socket PATH [--history 4m] [--memory-limit BYTES]
      watch the pod's inbound TCP traffic from its start and serve the
      history to the wait command's --watch-socket (a native sidecar's job)
  draingate-prestop wait [flags] [-- ARGV...]
      wait until the gate server releases this pod (or max-wait passes, or
      the fallback when no gate server answers), then run the original
      preStop hook: ARGV, --then-http-get or --then-sleep; always exits 0
  draingate-prestop version
      print the version

flags of wait, each also read from the environment variable shown:
`)
	for _, f := range waitFlags {
		def := ""
		if f.def != "" {
			def = ", default " + f.def
		}
		fmt.Fprintf(&w, "  --%s\n      %s (%s%s)\n", f.name, f.usage, cli.Name(f.name), def)
	}
	return w.String()
}

// waitCommand runs "wait". Bad flags never block termination: the agent
// says what is wrong, skips the wait (it cannot trust a deadline it could
// not read) and still runs the original hook if that much was readable.
func waitCommand(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) {
	cfg, opts, problems := parseWait(args, getenv)
	out := stdout
	var logErr error
	if opts.logPath != "" {
		f, err := os.OpenFile(opts.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			logErr = err
		} else {
			defer f.Close()
			out = tee{stdout, f}
		}
	}
	log := logger{out}
	if logErr != nil {
		log.printf("not logging to the --log file: %v", logErr)
	}
	for _, w := range opts.warnings {
		log.printf("bad flag: %s", w)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			log.printf("bad flag: %s", p)
		}
		log.printf("not waiting: with bad flags the agent cannot trust its settings")
		runHook(ctx, cfg.Then, out, log)
		return
	}
	cfg.Out = out
	// The watch starts before the first ask and ends when Run returns; a
	// run that will not ask has nothing to send it with.
	if opts.traffic && cfg.MaxWait > 0 && cfg.Validate() == nil {
		summary, stop := startTraffic(traffic.NewReader().Read, trafficInterval, log)
		defer stop()
		if opts.watchSocket != "" {
			summary = withHistory(askWatcher(opts.watchSocket), summary, traffic.Gateways(), log)
		}
		cfg.Traffic = summary
	}
	Run(ctx, cfg)
}

// boolFlags are the wait flags that may be given bare: --traffic-evidence
// means --traffic-evidence=true.
var boolFlags = map[string]bool{"traffic-evidence": true}

// waitOptions are the wait command's settings that are not the Config of
// one Run.
type waitOptions struct {
	// logPath is --log: a file to append the log lines to.
	logPath string
	// traffic is --traffic-evidence.
	traffic bool
	// watchSocket is --watch-socket: the pod's watcher, "" for none.
	watchSocket string
	// warnings are bad settings that cost nothing but themselves, logged
	// without skipping the wait.
	warnings []string
}

// boolFlag is a boolean flag that package flag lets stand bare, kept as the
// text given so that parseWait judges it and names where it came from.
// Set never fails: a bad value is reported by parseWait instead.
type boolFlag string

func (b *boolFlag) String() string {
	if b == nil {
		return ""
	}
	return string(*b)
}

func (b *boolFlag) Set(s string) error { *b = boolFlag(s); return nil }

func (b *boolFlag) IsBoolFlag() bool { return true }

// parseWait reads the wait command's flags and environment. It reads all it
// can past a bad flag, so that one mistake does not cost the original hook.
func parseWait(args []string, getenv func(string) string) (cfg Config, opts waitOptions, problems []string) {
	flagArgs, argv := splitArgv(args)
	fs := waitFlagSet()
	problems = parseFlags(fs, flagArgs)
	set := map[string]bool{} // given on the command line
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// The flags are strings, so the environment cannot fail to set them:
	// the values are checked below, naming where each came from.
	if err := cli.Apply(fs, getenv); err != nil {
		problems = append(problems, api.OneLine(err.Error()))
	}
	fromEnv := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fromEnv[f.Name] = !set[f.Name] })
	// value returns the setting and where it came from, for error messages.
	value := func(name string) (string, string) {
		v := fs.Lookup(name).Value.String()
		if fromEnv[name] {
			return v, "$" + cli.Name(name)
		}
		return v, "--" + name
	}
	duration := func(name string, positive bool) time.Duration {
		s, from := value(name)
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s %q is not a duration such as 30s or 1m30s", from, s))
		case positive && d <= 0:
			problems = append(problems, fmt.Sprintf("%s %s must be more than 0", from, s))
		case d < 0:
			problems = append(problems, fmt.Sprintf("%s %s must not be negative", from, s))
		}
		return d
	}
	cfg.Server, _ = value("server")
	cfg.Pod, _ = value("pod-name")
	cfg.Namespace, _ = value("pod-namespace")
	cfg.UID, _ = value("pod-uid")
	cfg.MaxWait = duration("max-wait", false)
	cfg.Fallback = duration("fallback", false)
	cfg.PollWait = duration("poll-wait", true)
	cfg.TokenFile, _ = value("token-file")
	opts.logPath, _ = value("log")
	opts.watchSocket, _ = value("watch-socket")
	// A bad --traffic-evidence only turns the evidence off: without it the
	// server relies on route tails alone, which is always safe, so it is
	// no reason to skip the wait.
	s, from := value("traffic-evidence")
	on, err := strconv.ParseBool(s)
	if err != nil {
		opts.warnings = append(opts.warnings, fmt.Sprintf("%s %q is not true or false: sending no traffic evidence", from, s))
	}
	opts.traffic = on
	var hookProblems []string
	cfg.Then, hookProblems = pickHook(argv, set, value)
	problems = append(problems, hookProblems...)
	return cfg, opts, problems
}

// splitArgv parts the wait command's arguments at the first "--": the flags
// before it, the original hook's argv after it (nil without a "--").
func splitArgv(args []string) (flagArgs, argv []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

// waitFlagSet declares the wait flags, all as text (boolFlags may stand
// bare) so that parseWait checks each value itself and says where it came
// from. The set prints nothing: parseWait reports its errors.
func waitFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range waitFlags {
		if boolFlags[f.name] {
			b := boolFlag(f.def)
			fs.Var(&b, f.name, f.usage)
			continue
		}
		fs.String(f.name, f.def, f.usage)
	}
	return fs
}

// parseFlags parses args into fs, reading past each bad flag or stray
// argument (which it reports) to the end, so that one mistake does not hide
// the flags after it.
func parseFlags(fs *flag.FlagSet, args []string) (problems []string) {
	for rest := args; len(rest) > 0; {
		err := fs.Parse(rest)
		next := fs.Args()
		switch {
		case errors.Is(err, flag.ErrHelp):
			problems = append(problems, "-h: run draingate-prestop help for usage")
		case err != nil:
			problems = append(problems, err.Error())
		case len(next) > 0:
			problems = append(problems, fmt.Sprintf("unexpected argument %q: the original hook's argv goes after --", next[0]))
			next = next[1:]
		}
		// flag stops at a bad flag without always consuming it: skip it
		// here so the rest still gets read.
		if len(next) == len(rest) {
			next = next[1:]
		}
		rest = next
	}
	return problems
}

// pickHook finds the original hook. The command line wins over the
// environment as a whole, so a stale variable cannot add a second hook.
// Given more than one, it reports that and picks the first usable of exec,
// http-get, sleep: running one of the app's hooks beats running none.
func pickHook(argv []string, set map[string]bool, value func(string) (string, string)) (Hook, []string) {
	fromCommandLine := len(argv) > 0 || set["then-http-get"] || set["then-sleep"]
	var (
		candidates []Hook
		names      []string
		problems   []string
	)
	if len(argv) > 0 {
		candidates, names = append(candidates, Hook{Exec: argv}), append(names, "exec")
	}
	if s, from := value("then-http-get"); s != "" && (set["then-http-get"] || !fromCommandLine) {
		names = append(names, "http-get")
		if _, err := checkHTTPURL(s); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", from, err))
		} else {
			candidates = append(candidates, Hook{HTTPGet: s})
		}
	}
	if s, from := value("then-sleep"); s != "" && (set["then-sleep"] || !fromCommandLine) {
		names = append(names, "sleep")
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			problems = append(problems, fmt.Sprintf("%s %q is not a duration such as 5s", from, s))
		} else {
			candidates = append(candidates, Hook{Sleep: d})
		}
	}
	if len(names) > 1 {
		chosen := "none of them"
		if len(candidates) > 0 {
			chosen = candidates[0].String()
		}
		problems = append(problems, fmt.Sprintf("more than one original hook given (%s): running %s", strings.Join(names, ", "), chosen))
	}
	if len(candidates) == 0 {
		return Hook{}, problems
	}
	return candidates[0], problems
}

// tee writes to every writer whatever happens to the others: a closed log
// file must not silence stdout, nor the reverse.
type tee []io.Writer

func (t tee) Write(p []byte) (int, error) {
	for _, w := range t {
		w.Write(p)
	}
	return len(p), nil
}
