package app

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestMainDrainsOnSIGTERM sends a real SIGTERM to this test process: Main
// has registered for it before it prints "listening", so the signal drains
// the server instead of killing the process.
func TestMainDrainsOnSIGTERM(t *testing.T) {
	pr, pw := io.Pipe()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	done := make(chan error, 1)
	go func() {
		done <- Main([]string{"-addr", "127.0.0.1:0", "-shutdown-timeout", "30s"}, pw)
		pw.Close()
	}()

	var addr string
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "listening" {
			t.Fatalf("first line %q; want \"listening <addr> <ns>\"", line)
		}
		addr = f[1]
	case err := <-done:
		t.Fatalf("Main returned before listening: %v", err)
	}

	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d", res.StatusCode)
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for line := range lines {
		rest = append(rest, strings.Fields(line)[0])
	}
	if err := <-done; err != nil {
		t.Fatalf("Main after SIGTERM: %v; want nil (exit 0)", err)
	}
	if strings.Join(rest, " ") != "sigterm exit" {
		t.Errorf("lines after listening: %v; want [sigterm exit]", rest)
	}
}
