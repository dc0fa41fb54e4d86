package prestop

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hookMarkerEnv turns the test binary into an exec hook: re-executed with it
// set, the binary writes the time and its arguments to that file and exits
// with the status in hookExitEnv. That keeps the exec hook tests free of any
// shell or tool from the host.
const (
	hookMarkerEnv = "DRAINGATE_PRESTOP_TEST_MARKER"
	hookExitEnv   = "DRAINGATE_PRESTOP_TEST_EXIT"
)

func TestMain(m *testing.M) {
	if marker := os.Getenv(hookMarkerEnv); marker != "" {
		line := fmt.Sprintf("%d %s", time.Now().UnixNano(), strings.Join(os.Args[1:], "|"))
		if err := os.WriteFile(marker, []byte(line), 0o644); err != nil {
			os.Exit(100)
		}
		code, _ := strconv.Atoi(os.Getenv(hookExitEnv))
		os.Exit(code)
	}
	// The agent dials the tests' in-memory network; TestHTTPGetOverTCP
	// puts the real one back.
	dial = testNet.dial
	os.Exit(m.Run())
}
