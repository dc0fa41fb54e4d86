package prestop

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"time"
)

// runHook runs the original hook with its own time: the wait is over, and
// the hook gets whatever it needs within the pod's grace period (which the
// webhook sizes to fit max-wait plus the hook). It reports whether the hook
// started, and its failure.
func runHook(ctx context.Context, h Hook, out io.Writer, log logger) (bool, error) {
	if h.IsZero() {
		log.printf("no original hook; done")
		return false, nil
	}
	if err := h.Validate(); err != nil {
		log.printf("original hook not run: %v", err)
		return false, err
	}
	if err := ctx.Err(); err != nil {
		log.printf("original hook %s not run: %v", h, context.Cause(ctx))
		return false, err
	}
	log.printf("running original hook: %s", h)
	start := time.Now()
	note, err := h.run(ctx, out)
	if err != nil {
		// The failure is the app's hook's, reported as the kubelet would;
		// the agent itself still succeeds so termination goes on.
		log.printf("original hook failed after %s: %v", round(time.Since(start)), err)
		return true, err
	}
	log.printf("original hook done after %s%s", round(time.Since(start)), note)
	return true, nil
}

// run runs the hook's one action; note adds to the "done" line.
func (h Hook) run(ctx context.Context, out io.Writer) (note string, err error) {
	switch {
	case len(h.Exec) > 0:
		cmd := exec.CommandContext(ctx, h.Exec[0], h.Exec[1:]...)
		if out != io.Discard {
			cmd.Stdout, cmd.Stderr = out, out
		}
		// A hook that leaves a background process holding its output pipe
		// must not hold the agent once the hook itself has exited.
		cmd.WaitDelay = 2 * time.Second
		return "", cmd.Run()
	case h.HTTPGet != "":
		// Like the kubelet's httpGet handler, any answer means done; the
		// status is only reported.
		resp, err := httpGet(ctx, h.HTTPGet, false, "")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf(" (answered %d)", resp.status), nil
	case h.Sleep > 0:
		sleepUntil(ctx, time.Now().Add(h.Sleep))
		return "", ctx.Err()
	}
	return "", nil
}
