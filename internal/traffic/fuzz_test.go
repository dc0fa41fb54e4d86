package traffic

import (
	"testing"
)

// FuzzParseDump feeds parseDump arbitrary datagrams: it must never panic,
// must return nothing with an error (half a reading would look like
// connections that vanished), and what it accepts must be sockets the
// watcher can use.
func FuzzParseDump(f *testing.F) {
	const seq = 1
	f.Add(nlmsg(nlmsgDone, 2, seq, []byte{0, 0, 0, 0}))
	f.Add(concat(
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, Listen, ap("0.0.0.0:8080"), ap("0.0.0.0:0"), 1)),
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, Established, ap("10.1.2.3:8080"), ap("10.9.8.7:51234"), 2,
			rtattr(inetDiagInfo, tcpInfo(232, 1500, 5000, 40, 12)))),
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet6, CloseWait, ap("[::ffff:10.1.2.3]:8080"), ap("[fd00::1]:1"), 3,
			rtattr(1, make([]byte, 20)), rtattr(inetDiagInfo, tcpInfo(104, 20, 0, 0, 0)))),
		nlmsg(nlmsgDone, 2, seq, []byte{0, 0, 0, 0}),
	))
	f.Add(nlmsg(nlmsgError, 0, seq, errPayload(-13)))
	f.Add(nlmsg(sockDiagByFamily, 2|nlmFDumpIntr, seq, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, done, err := parseDump(b, seq)
		if err != nil {
			if socks != nil || done {
				t.Fatalf("rejected with %v, yet returned %d sockets, done %v", err, len(socks), done)
			}
			return
		}
		for _, c := range socks {
			if c.State < Established || c.State > NewSynRecv {
				t.Fatalf("accepted state %d", c.State)
			}
			if !c.Local.Addr().IsValid() || !c.Remote.Addr().IsValid() || c.Local.Addr().Is4In6() || c.Remote.Addr().Is4In6() {
				t.Fatalf("accepted addresses %v %v", c.Local, c.Remote)
			}
			in := c.Info
			if in.HasBytesReceived && !in.HasLastDataRecv || in.HasSegsIn && !in.HasBytesReceived || in.HasDataSegsIn && !in.HasSegsIn {
				t.Fatalf("tcp_info fields known out of order: %+v", in)
			}
		}
		// Whatever it accepted, a watcher takes without panicking.
		snap := splitSockets(socks)
		w := NewWatcher(func() (Snapshot, error) { return snap, nil })
		w.Sample(testStart)
		w.Sample(testStart.Add(tick))
		if s := w.Summary(testStart.Add(tick)); s == nil {
			t.Fatal("no summary after two samples")
		}
	})
}

// FuzzParseSNMP: the counter's parser never panics on whatever
// /proc/net/snmp holds.
func FuzzParseSNMP(f *testing.F) {
	f.Add([]byte("Tcp: ActiveOpens PassiveOpens\nTcp: 1 2\n"))
	f.Add([]byte("Ip: a\nIp: 1\nTcp: PassiveOpens\nTcp: 18446744073709551615\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseSNMP(b)
	})
}
