package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"draingate.dev/draingate/internal/version"
)

// Main is a program's whole command line: it returns the exit code.
type Main func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int

// Run runs main with the process's arguments, environment and standard
// streams, and exits with its code. SIGINT and SIGTERM end main's context.
func Run(main Main) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Dispatch runs the subcommand args[0] names, with the arguments after
// it, and returns its exit code. Besides the program's own commands it
// knows "version" (prints the program's name and version) and "help" (and
// -h, --help: prints usage to stdout). No command, or an unknown one,
// prints usage to stderr and returns 2.
func Dispatch(program, usage string, commands map[string]func(args []string) int, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if c, ok := commands[args[0]]; ok {
		return c(args[1:])
	}
	switch args[0] {
	case "version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "%s: version takes no arguments\n", program)
			return 2
		}
		fmt.Fprintln(stdout, program, version.String())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n", program, args[0])
	fmt.Fprint(stderr, usage)
	return 2
}

// serviceAccountNamespace is where a pod's ServiceAccount says its
// namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace is the namespace the command's own pod runs in; "" outside
// a pod.
func PodNamespace() string {
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
