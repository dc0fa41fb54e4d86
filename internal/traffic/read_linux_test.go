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

// A Reader looks its known connections up between dumps, and what it sees
// then is what a dump sees; a moved counter, an unreadable one, or
// dumpEvery passed make it dump again.
func TestReaderLooksUpWhatItKnows(t *testing.T) {
	readOrSkip(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (client, server net.Conn) {
		t.Helper()
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return client, server
	}
	addrs := func(c net.Conn) (local, remote netip.AddrPort) {
		return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	}
	client, server := dial()
	defer client.Close()
	defer server.Close()
	local, remote := addrs(server)
	closedClient, closedServer := dial()
	cl, cr := addrs(closedServer)

	opens, openErr := uint64(7), error(nil)
	r := &Reader{counter: func() (uint64, error) { return opens, openErr }}
	s0, err := r.Read()
	if err != nil || r.Dumps != 1 || r.Lookups != 0 {
		t.Fatalf("first read: err %v, %d dumps, %d lookups; want one dump", err, r.Dumps, r.Lookups)
	}
	c0, ok := findConn(s0, local, remote)
	if !ok {
		t.Fatal("the first read lacks the accepted connection")
	}
	if !slices.Contains(s0.Listening, local.Port()) || s0.PassiveOpens != 7 {
		t.Errorf("first read: listening %v, PassiveOpens %d", s0.Listening, s0.PassiveOpens)
	}

	if _, err := client.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	// The server closes first: its end goes to TIME_WAIT, still listed.
	closedServer.Close()
	closedClient.Close()
	time.Sleep(50 * time.Millisecond)

	s1, err := r.Read()
	if err != nil || r.Dumps != 1 || r.Lookups != 1 {
		t.Fatalf("second read, counter unmoved: err %v, %d dumps, %d lookups; want a lookup", err, r.Dumps, r.Lookups)
	}
	dumped := readOrSkip(t)
	c1, ok := findConn(s1, local, remote)
	d1, dok := findConn(dumped, local, remote)
	if !ok || !dok {
		t.Fatalf("the accepted connection: looked up %v, dumped %v", ok, dok)
	}
	if c1.Cookie != c0.Cookie || c1.State != Established || c1.Info.BytesReceived != 100 || c1.Info.BytesReceived != d1.Info.BytesReceived {
		t.Errorf("looked up %+v, dumped %+v; want the same cookie and 100 bytes received", c1, d1)
	}
	lc, lok := findConn(s1, cl, cr)
	dc, dcok := findConn(dumped, cl, cr)
	if lok != dcok || lok && (lc.State != dc.State || lc.Cookie != dc.Cookie) {
		t.Errorf("the closed connection's server end: looked up %+v (%v), dumped %+v (%v)", lc, lok, dc, dcok)
	}
	if !slices.Equal(s1.Listening, s0.Listening) {
		t.Errorf("listening ports changed without a dump: %v, then %v", s0.Listening, s1.Listening)
	}

	// A socket the key no longer names is gone: another cookie on the
	// same addresses (the listener's port would match an address lookup
	// without it), or addresses no socket has.
	stale := c1
	stale.key.id[40] ^= 0xff
	moved := c1
	moved.key.id[2] ^= 0xff // the remote port
	got, err := lookupTCP([]Conn{stale, c1, moved})
	if err != nil || len(got) != 1 || got[0].Cookie != c1.Cookie {
		t.Errorf("lookups of a stale, a live and a moved key: %+v, %v; want only the live one", got, err)
	}

	opens++
	if _, err := r.Read(); err != nil || r.Dumps != 2 {
		t.Errorf("the counter moved: err %v, %d dumps; want a second dump", err, r.Dumps)
	}
	openErr = errors.New("no /proc")
	if s, err := r.Read(); err != nil || r.Dumps != 3 || s.PassiveOpensErr == nil {
		t.Errorf("the counter unreadable: err %v, %d dumps, PassiveOpensErr %v; want a dump and the error", err, r.Dumps, s.PassiveOpensErr)
	}
	openErr = nil
	r.Read() // a dump: the counter was unknown
	r.dumpedAt = time.Now().Add(-dumpEvery)
	if _, err := r.Read(); err != nil || r.Dumps != 5 {
		t.Errorf("past dumpEvery: err %v, %d dumps; want a dump", err, r.Dumps)
	}
}

// What a look costs, dumping the namespace's TCP table against looking up
// the sockets known: the figures for docs/traffic.md.
func BenchmarkReadDump(b *testing.B) {
	for b.Loop() {
		if _, err := Read(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadLookup(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	// As many connections as the lab's pods hold (about 100 ends).
	for range 50 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
	}
	s, err := Read()
	if err != nil {
		b.Fatal(err)
	}
	var mine []Conn
	for _, c := range s.Conns {
		if c.Local.Port() == uint16(ln.Addr().(*net.TCPAddr).Port) || c.Remote.Port() == uint16(ln.Addr().(*net.TCPAddr).Port) {
			mine = append(mine, c)
		}
	}
	b.ReportMetric(float64(len(mine)), "sockets")
	for b.Loop() {
		got, err := lookupTCP(mine)
		if err != nil || len(got) != len(mine) {
			b.Fatalf("%d of %d: %v", len(got), len(mine), err)
		}
	}
}
