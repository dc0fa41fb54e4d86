// Command draingate-cluster starts and stops the project's one-node test
// cluster for people (make cluster-up / cluster-down); Go tests use the same
// code through proving/testenv.
//
//	draingate-cluster up     start the cluster (or report the one running)
//	draingate-cluster down   stop it and undo every host change, also after
//	                         a killed run
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"draingate.dev/draingate/proving/testenv"
)

func main() {
	fs := flag.NewFlagSet("draingate-cluster", flag.ContinueOnError)
	runDir := fs.String("run-dir", "", "run folder (default $DRAINGATE_CLUSTER_DIR or .cluster at the repository root)")
	binDir := fs.String("bin-dir", "", "cluster binaries (default $DRAINGATE_BIN_DIR or .tools/bin at the repository root)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draingate-cluster [flags] up|down")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	opts := testenv.Options{RunDir: *runDir, BinDir: *binDir}
	var err error
	switch fs.Arg(0) {
	case "up":
		var c *testenv.Cluster
		if c, err = testenv.Start(ctx, opts); err == nil {
			fmt.Printf("cluster up; run:\n  export KUBECONFIG=%s\n", c.Kubeconfig)
		}
	case "down":
		dir := opts.RunDir
		if dir == "" {
			dir = os.Getenv("DRAINGATE_CLUSTER_DIR")
		}
		if dir == "" {
			var root string
			if root, err = testenv.ModuleRoot(); err == nil {
				dir = root + "/.cluster"
			}
		}
		if err == nil {
			err = testenv.Down(ctx, dir, os.Stderr)
		}
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "draingate-cluster:", err)
		os.Exit(1)
	}
}
