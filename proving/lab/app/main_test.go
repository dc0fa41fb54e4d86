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

	for _, path := range []string{"/healthz", "/"} {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for line := range lines {
		f := strings.Fields(line)
		if f[0] == "source" && (len(f) != 4 || f[1] != "127.0.0.1" || f[2] != "1" || f[3] != "0") {
			t.Errorf("line %q; want \"source 127.0.0.1 1 0\" for the one GET /", line)
		}
		rest = append(rest, f[0])
	}
	if err := <-done; err != nil {
		t.Fatalf("Main after SIGTERM: %v; want nil (exit 0)", err)
	}
	if strings.Join(rest, " ") != "sigterm source exit" {
		t.Errorf("lines after listening: %v; want [sigterm source exit]", rest)
	}
}
