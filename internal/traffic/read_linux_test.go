//go:build linux

package traffic

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
)

// readOrSkip reads the real namespace's sockets; only a kernel that refuses
// sock_diag itself skips the test.
func readOrSkip(t *testing.T) Snapshot {
	t.Helper()
	s, err := Read()
	for _, refused := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.EPROTONOSUPPORT, syscall.EAFNOSUPPORT, syscall.ENOENT} {
		if errors.Is(err, refused) {
			t.Skipf("this kernel (or sandbox) refuses NETLINK_SOCK_DIAG TCP dumps, so there is nothing real to read: %v", err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func findConn(s Snapshot, local, remote netip.AddrPort) (Conn, bool) {
	for _, c := range s.Conns {
		if c.Local == local && c.Remote == remote {
			return c, true
		}
	}
	return Conn{}, false
}

// Read against real sockets: a loopback listener and one accepted
// connection (loopback peers are what the watcher ignores, so this test
// checks the reading, not the counting).
func TestReadRealSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	local := server.LocalAddr().(*net.TCPAddr).AddrPort()
	remote := server.RemoteAddr().(*net.TCPAddr).AddrPort()

	before := readOrSkip(t)
	if !slices.Contains(before.Listening, local.Port()) {
		t.Errorf("listening ports %v lack the listener's %d", before.Listening, local.Port())
	}
	c0, ok := findConn(before, local, remote)
	if !ok {
		t.Fatalf("the accepted connection %s <- %s is not among %d connections", local, remote, len(before.Conns))
	}
	if c0.Cookie == 0 || c0.State != Established {
		t.Errorf("accepted connection: %+v", c0)
	}
	if !c0.Info.HasBytesReceived || !c0.Info.HasLastDataRecv {
		t.Skipf("this kernel's tcp_info lacks bytes_received (before Linux 4.1): %+v", c0.Info)
	}
	if c0.Info.BytesReceived != 0 {
		t.Errorf("bytes received before any write: %d", c0.Info.BytesReceived)
	}
	if before.PassiveOpensErr != nil || before.PassiveOpens == 0 {
		t.Errorf("PassiveOpens %d, %v; want the counter, at least this test's accept", before.PassiveOpens, before.PassiveOpensErr)
	}

	wrote := time.Now()
	if _, err := client.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	// A second connection, so the counter must rise.
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()

	after := readOrSkip(t)
	read := time.Since(wrote)
	c1, ok := findConn(after, local, remote)
	if !ok {
		t.Fatal("the accepted connection is gone from the second reading")
	}
	if c1.Cookie != c0.Cookie {
		t.Errorf("cookie changed from %d to %d", c0.Cookie, c1.Cookie)
	}
	if c1.Info.BytesReceived != 100 {
		t.Errorf("bytes received after the client wrote 100: %d", c1.Info.BytesReceived)
	}
	// The kernel counts in jiffies (up to 10 ms each).
	if c1.Info.LastDataRecv > read+20*time.Millisecond {
		t.Errorf("last data received %s ago, but it was written %s ago", c1.Info.LastDataRecv, read)
	}
	if !c1.Info.HasDataSegsIn || c1.Info.DataSegsIn == 0 {
		t.Errorf("data segments in: %+v", c1.Info)
	}
	if after.PassiveOpens <= before.PassiveOpens {
		t.Errorf("PassiveOpens went from %d to %d over an accept", before.PassiveOpens, after.PassiveOpens)
	}
	if _, ok := findConn(after, s2.LocalAddr().(*net.TCPAddr).AddrPort(), s2.RemoteAddr().(*net.TCPAddr).AddrPort()); !ok {
		t.Error("the second accepted connection is not listed")
	}
	// The client ends are listed too, with their own cookies.
	if cc, ok := findConn(after, remote, local); !ok || cc.Cookie == c1.Cookie {
		t.Errorf("client end: %+v, listed %v", cc, ok)
	}
}

// IPv6 sockets come from the second half of the dump.
func TestReadRealIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer ln.Close()
	s := readOrSkip(t)
	if port := uint16(ln.Addr().(*net.TCPAddr).Port); !slices.Contains(s.Listening, port) {
		t.Errorf("listening ports %v lack the IPv6 listener's %d", s.Listening, port)
	}
}
