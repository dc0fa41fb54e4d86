// Command testapp is the one static binary the cluster tests run in pods:
//
//	testapp serve [-addr :8080]   HTTP server; logs "sigterm <ns>" and "exit <ns>"
//	testapp copy DIR              copies itself into DIR (an init container's job)
//	testapp hook [-sleep 3s]      a preStop hook: logs "hook-start"/"hook-end" to
//	                              the container's main process's stdout
//	testapp get [-timeout 30s] URL  fetches URL, retrying until it answers
//	testapp flood [-for 30s] N=URL...  N clients each GET URL over and over;
//	                              ignores SIGTERM; prints per URL the answers
//	                              by status and the most answers held at once
//
// Times are Unix nanoseconds from the node's clock, so a test can order them
// against what it saw through the API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testapp serve|copy|hook|get ...")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var err error
	switch os.Args[1] {
	case "serve":
		addr := fs.String("addr", ":8080", "listen address")
		fs.Parse(os.Args[2:])
		err = serve(*addr)
	case "copy":
		fs.Parse(os.Args[2:])
		err = copySelf(fs.Arg(0))
	case "hook":
		sleep := fs.Duration("sleep", 3*time.Second, "how long the hook runs")
		fs.Parse(os.Args[2:])
		err = hook(*sleep)
	case "get":
		timeout := fs.Duration("timeout", 30*time.Second, "give up after")
		fs.Parse(os.Args[2:])
		err = get(fs.Arg(0), *timeout)
	case "flood":
		d := fs.Duration("for", 30*time.Second, "how long to flood")
		fs.Parse(os.Args[2:])
		err = flood(fs.Args(), *d)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

func stamp() int64 { return time.Now().UnixNano() }

func serve(addr string) error {
	host, _ := os.Hostname()
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("serving %s %d\n", addr, stamp())
	select {
	case err := <-errc:
		return err
	case <-sig:
		fmt.Printf("sigterm %d\n", stamp())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	fmt.Printf("exit %d\n", stamp())
	return err
}

func copySelf(dir string) error {
	if dir == "" {
		return errors.New("copy: missing target folder")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "testapp"), b, 0o755)
}

// hook writes to the stdout of the container's PID 1, so its lines land in
// the container log (an exec hook's own output is not kept). It also names
// PID 1, which proves it ran inside the container's PID namespace.
func hook(sleep time.Duration) error {
	out, err := os.OpenFile("/proc/1/fd/1", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer out.Close()
	cmdline, _ := os.ReadFile("/proc/1/cmdline")
	pid1 := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
	fmt.Fprintf(out, "hook-start %d pid1=%q\n", stamp(), pid1)
	time.Sleep(sleep)
	fmt.Fprintf(out, "hook-end %d\n", stamp())
	return nil
}

func get(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	cl := &http.Client{Timeout: 3 * time.Second}
	for {
		resp, err := cl.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Printf("%s", body)
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		fmt.Fprintln(os.Stderr, "retrying:", err)
		time.Sleep(500 * time.Millisecond)
	}
}

// heldAfter tells a held answer (a long-poll the server kept) from one
// answered at once, for flood's count: well above any answer's latency on
// a loaded machine, well below the long-poll's wait (10 s in the tests).
const heldAfter = 4 * time.Second

// heldEdge is trimmed from the end of each held answer before counting
// overlaps: the server frees a place when it writes its answer, and the
// next client may take it before this client has read the answer, so
// overlaps shorter than this are not places held at once.
const heldEdge = time.Second

// flood runs, for each N=URL target, N clients that GET URL until d
// passes, pausing a little after an answer the server did not hold. It
// ignores SIGTERM (it floods on while its pod terminates), then prints per
// target "flood <url> <status>=<count>..." and "flood <url> held-max=<k>":
// the most answers held at once (each held heldAfter or more, its last
// heldEdge not counted).
func flood(targets []string, d time.Duration) error {
	signal.Ignore(syscall.SIGTERM)
	end := time.Now().Add(d)
	type span struct{ from, to time.Time }
	type result struct {
		mu     sync.Mutex
		status map[string]int
		held   []span
	}
	results := make([]*result, len(targets))
	var wg sync.WaitGroup
	cl := &http.Client{Timeout: d + 30*time.Second}
	for i, t := range targets {
		ns, url, ok := strings.Cut(t, "=")
		n, err := strconv.Atoi(ns)
		if !ok || err != nil || n <= 0 {
			return fmt.Errorf("flood: target %q: want N=URL", t)
		}
		r := &result{status: map[string]int{}}
		results[i] = r
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					start := time.Now()
					code := "error"
					resp, err := cl.Get(url)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = strconv.Itoa(resp.StatusCode)
					}
					took := time.Since(start)
					r.mu.Lock()
					r.status[code]++
					if took >= heldAfter {
						r.held = append(r.held, span{start, start.Add(took - heldEdge)})
					}
					r.mu.Unlock()
					if took < heldAfter {
						time.Sleep(200 * time.Millisecond)
					}
				}
			}()
		}
	}
	wg.Wait()
	for i, t := range targets {
		_, url, _ := strings.Cut(t, "=")
		r := results[i]
		var codes []string
		for c, n := range r.status {
			codes = append(codes, fmt.Sprintf("%s=%d", c, n))
		}
		sort.Strings(codes)
		most := 0
		for _, a := range r.held {
			at := 0
			for _, b := range r.held {
				if !b.from.After(a.from) && b.to.After(a.from) {
					at++
				}
			}
			most = max(most, at)
		}
		fmt.Printf("flood %s %s\n", url, strings.Join(codes, " "))
		fmt.Printf("flood %s held-max=%d\n", url, most)
	}
	return nil
}
