package status

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"draingate.dev/draingate/internal/cli"
)

const usage = `usage:
  kubectl draingate status [POD] [-n NAMESPACE | -A] [-o table|json]
      the terminating pods (or POD, terminating or not) with how long each has
      waited, why it still waits, and each route's state and what closed it
  kubectl draingate explain POD [-n NAMESPACE] [-o text|json]
      the gate's last verdict on POD in full: every route with its times and detail
      (also for a pod already gone, from its Events: an hour by default)
  kubectl draingate version

Both read the gate server's Events on the pods (DrainWaitStarted, DrainRoutesChanged,
DrainReleased, DrainDeadline), with your own rights: you need to list pods and
Events in the namespace. Flags: --kubeconfig, --context, -n/--namespace,
-A/--all-namespaces (status), -o/--output.
`

// Main is the kubectl-draingate command line; it returns the exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cli.Dispatch("kubectl-draingate", usage, map[string]func([]string) int{
		"status":  func(args []string) int { return run(ctx, "status", args, stdout, stderr) },
		"explain": func(args []string) int { return run(ctx, "explain", args, stdout, stderr) },
	}, args, stdout, stderr)
}

type options struct {
	kubeconfig, context, namespace, output string
	all                                    bool
	pod                                    string
}

// parse reads flags before and after the one POD argument, as kubectl does.
func parse(cmd string, args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("kubectl draingate "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the kubeconfig file; empty: $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&o.context, "context", "", "the kubeconfig context; empty: its current one")
	for _, n := range []string{"n", "namespace"} {
		fs.StringVar(&o.namespace, n, "", "the namespace; empty: the context's")
	}
	for _, n := range []string{"o", "output"} {
		fs.StringVar(&o.output, n, "", "table (status) or text (explain), or json")
	}
	if cmd == "status" {
		for _, n := range []string{"A", "all-namespaces"} {
			fs.BoolVar(&o.all, n, false, "every namespace")
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) > 1:
		return nil, fmt.Errorf("kubectl draingate %s takes one pod, got %q", cmd, pos)
	case cmd == "explain" && len(pos) == 0:
		return nil, errors.New("kubectl draingate explain needs a pod: kubectl draingate explain POD [-n NAMESPACE]")
	case o.all && len(pos) == 1:
		return nil, errors.New("kubectl draingate status: name a pod or give -A, not both")
	case o.all && o.namespace != "":
		return nil, errors.New("kubectl draingate status: give -n or -A, not both")
	}
	if len(pos) == 1 {
		o.pod = pos[0]
	}
	switch o.output {
	case "", "json", "table", "text":
	default:
		return nil, fmt.Errorf("-o %s: want table, text or json", o.output)
	}
	return o, nil
}

func run(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	o, err := parse(cmd, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	ns := o.namespace
	if ns == "" && !o.all {
		if ns, _, err = cc.Namespace(); err != nil {
			fmt.Fprintf(stderr, "kubectl draingate: %v\n", err)
			return 1
		}
	}
	config, err := cc.ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "kubectl draingate: %v\n", err)
		return 1
	}
	config.UserAgent = "kubectl-draingate"
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl draingate: %v\n", err)
		return 1
	}
	now := time.Now()
	if cmd == "explain" || o.pod != "" {
		p, err := One(ctx, c, ns, o.pod)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl draingate %s: %v\n", cmd, err)
			return 1
		}
		switch {
		case o.output == "json" && cmd == "explain":
			err = writeJSON(stdout, p.Verdict)
		case o.output == "json":
			err = writeJSON(stdout, []Pod{p})
		case cmd == "explain":
			err = WriteExplain(stdout, p, now)
		default:
			err = WriteTable(stdout, []Pod{p}, now)
		}
		return done(stderr, err)
	}
	pods, err := Terminating(ctx, c, ns)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl draingate status: %v\n", err)
		return 1
	}
	if o.output == "json" {
		return done(stderr, writeJSON(stdout, pods))
	}
	if len(pods) == 0 {
		where := "namespace " + ns
		if o.all {
			where = "any namespace"
		}
		fmt.Fprintf(stdout, "No terminating pods in %s.\n", where)
		return 0
	}
	return done(stderr, WriteTable(stdout, pods, now))
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

func done(stderr io.Writer, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "kubectl draingate: %v\n", err)
		return 1
	}
	return 0
}
