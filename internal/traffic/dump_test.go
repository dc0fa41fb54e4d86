package traffic

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The messages below are encoded by hand, as the kernel lays them out:
// netlink's own fields in the host's byte order (little endian on amd64 and
// arm64), inet_diag_sockid's ports and addresses in network order.

// nlmsg is one netlink message, padded to 4 bytes.
func nlmsg(typ, flags uint16, seq uint32, payload []byte) []byte {
	b := make([]byte, nlmsgHdrLen, align4(nlmsgHdrLen+len(payload)))
	ne.PutUint32(b[0:], uint32(nlmsgHdrLen+len(payload)))
	ne.PutUint16(b[4:], typ)
	ne.PutUint16(b[6:], flags)
	ne.PutUint32(b[8:], seq)
	ne.PutUint32(b[12:], 4242) // the receiving socket's port id
	b = append(b, payload...)
	return append(b, make([]byte, cap(b)-len(b))...)
}

// rtattr is one attribute, padded to 4 bytes.
func rtattr(typ uint16, data []byte) []byte {
	b := make([]byte, rtaHdrLen, align4(rtaHdrLen+len(data)))
	ne.PutUint16(b[0:], uint16(rtaHdrLen+len(data)))
	ne.PutUint16(b[2:], typ)
	b = append(b, data...)
	return append(b, make([]byte, cap(b)-len(b))...)
}

// diagMsg is a struct inet_diag_msg followed by attrs.
func diagMsg(family uint8, state State, local, remote netip.AddrPort, cookie uint64, attrs ...[]byte) []byte {
	b := make([]byte, inetDiagMsgLen)
	b[0], b[1] = family, byte(state)
	binary.BigEndian.PutUint16(b[4:], local.Port())
	binary.BigEndian.PutUint16(b[6:], remote.Port())
	if family == afInet {
		l, r := local.Addr().As4(), remote.Addr().As4()
		copy(b[8:], l[:])
		copy(b[24:], r[:])
	} else {
		l, r := local.Addr().As16(), remote.Addr().As16()
		copy(b[8:], l[:])
		copy(b[24:], r[:])
	}
	ne.PutUint32(b[40:], 2) // idiag_if
	ne.PutUint32(b[44:], uint32(cookie))
	ne.PutUint32(b[48:], uint32(cookie>>32))
	ne.PutUint32(b[68:], 123456) // idiag_inode
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

// tcpInfo is a struct tcp_info cut to n bytes, as an older kernel sends.
func tcpInfo(n int, lastDataRecvMS uint32, bytesReceived uint64, segsIn, dataSegsIn uint32) []byte {
	b := make([]byte, 280)
	b[0] = byte(Established)
	ne.PutUint32(b[tcpiLastDataRecv:], lastDataRecvMS)
	ne.PutUint64(b[tcpiBytesReceived:], bytesReceived)
	ne.PutUint32(b[tcpiSegsIn:], segsIn)
	ne.PutUint32(b[tcpiDataSegsIn:], dataSegsIn)
	return b[:n]
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func concat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func errPayload(errno int32) []byte {
	b := make([]byte, 4+nlmsgHdrLen) // the code, then the request's header
	ne.PutUint32(b, uint32(errno))
	return b
}

func TestParseDump(t *testing.T) {
	const seq = 7
	full := tcpInfo(232, 1500, 5000, 40, 12)
	dgram := concat(
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, Listen, ap("0.0.0.0:8080"), ap("0.0.0.0:0"), 1)),
		nlmsg(nlmsgNoop, 0, seq, nil),
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, Established, ap("10.1.2.3:8080"), ap("10.9.8.7:51234"), 0x1_0000_0002,
			rtattr(4, []byte("cubic\x00")), rtattr(inetDiagInfo, full))),
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet6, CloseWait, ap("[::ffff:10.1.2.3]:8080"), ap("[::ffff:10.9.8.6]:40000"), 3,
			rtattr(inetDiagInfo|0x8000, tcpInfo(104, 20, 0, 0, 0)))), // before 4.1: no bytes_received
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet6, TimeWait, ap("[fd00::5]:9090"), ap("[fd00::9]:443"), 4)),
	)
	socks, done, err := parseDump(dgram, seq)
	if err != nil || done {
		t.Fatalf("parseDump: done %v, err %v", done, err)
	}
	want := []Conn{
		{Cookie: 1, State: Listen, Local: ap("0.0.0.0:8080"), Remote: ap("0.0.0.0:0")},
		{Cookie: 0x1_0000_0002, State: Established, Local: ap("10.1.2.3:8080"), Remote: ap("10.9.8.7:51234"), Info: Info{
			BytesReceived: 5000, HasBytesReceived: true, DataSegsIn: 12, HasDataSegsIn: true, SegsIn: 40, HasSegsIn: true,
			LastDataRecv: 1500 * time.Millisecond, HasLastDataRecv: true}},
		{Cookie: 3, State: CloseWait, Local: ap("10.1.2.3:8080"), Remote: ap("10.9.8.6:40000"), Info: Info{
			LastDataRecv: 20 * time.Millisecond, HasLastDataRecv: true}},
		{Cookie: 4, State: TimeWait, Local: ap("[fd00::5]:9090"), Remote: ap("[fd00::9]:443")},
	}
	// Each socket keeps what asks for it again: its family and socket id
	// as sent, which an exact request carries back unchanged.
	for i, c := range socks {
		req := exactRequest(c.key, 9)
		if fam := []uint8{afInet, afInet, afInet6, afInet6}[i]; c.key.family != fam || req[nlmsgHdrLen] != fam {
			t.Errorf("socket %d: key family %d, request family %d; want %d", i, c.key.family, req[nlmsgHdrLen], fam)
		}
		if id := req[nlmsgHdrLen+8:]; !bytes.Equal(id, c.key.id[:]) || ne.Uint16(req[6:]) != nlmFRequest ||
			binary.BigEndian.Uint16(id[0:]) != c.Local.Port() || ne.Uint32(id[40:]) != uint32(c.Cookie) {
			t.Errorf("socket %d: exact request % x for %+v", i, req, c)
		}
		socks[i].key = lookupKey{}
	}
	if !reflect.DeepEqual(socks, want) {
		t.Errorf("sockets:\n got %+v\nwant %+v", socks, want)
	}

	// The dump goes on in the next datagram and ends with NLMSG_DONE,
	// whose payload is the dump's status.
	socks, done, err = parseDump(concat(
		nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, FinWait1, ap("10.1.2.3:8080"), ap("10.9.8.7:51235"), 9,
			rtattr(inetDiagInfo, tcpInfo(136, 0, 77, 0, 0)))),
		nlmsg(nlmsgDone, 2, seq, []byte{0, 0, 0, 0}),
		[]byte("whatever follows is not the dump's"),
	), seq)
	if err != nil || !done || len(socks) != 1 || !socks[0].Info.HasBytesReceived || socks[0].Info.HasSegsIn || socks[0].Info.BytesReceived != 77 {
		t.Errorf("last datagram: %+v, done %v, err %v", socks, done, err)
	}
	if socks, done, err := parseDump(nlmsg(nlmsgDone, 2, seq, nil), seq); err != nil || !done || socks != nil {
		t.Errorf("empty dump: %v %v %v", socks, done, err)
	}

	// The last message of a datagram may come without its padding.
	m := nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, Established, ap("10.1.2.3:80"), ap("10.9.8.7:1"), 1, rtattr(inetDiagInfo, []byte{1, 2, 3})))
	short := m[:len(m)-1]
	ne.PutUint32(short, uint32(len(short)))
	ne.PutUint16(short[nlmsgHdrLen+inetDiagMsgLen:], rtaHdrLen+3)
	if socks, _, err := parseDump(short, seq); err != nil || len(socks) != 1 || socks[0].Info != (Info{}) {
		t.Errorf("unpadded last message: %+v, %v", socks, err)
	}
}

func TestParseDumpRejects(t *testing.T) {
	const seq = 7
	good := nlmsg(sockDiagByFamily, 2, seq, diagMsg(afInet, Established, ap("10.1.2.3:8080"), ap("10.9.8.7:51234"), 2,
		rtattr(inetDiagInfo, tcpInfo(232, 1, 2, 3, 4))))
	withLen := func(b []byte, n uint32) []byte {
		b = append([]byte(nil), b...)
		ne.PutUint32(b, n)
		return b
	}
	attrLen := func(n uint16) []byte {
		b := append([]byte(nil), good...)
		ne.PutUint16(b[nlmsgHdrLen+inetDiagMsgLen:], n)
		return b
	}
	family := func(f byte) []byte {
		b := append([]byte(nil), good...)
		b[nlmsgHdrLen] = f
		return b
	}
	state := func(s byte) []byte {
		b := append([]byte(nil), good...)
		b[nlmsgHdrLen+1] = s
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"header cut short", good[:10], "too few for a message header"},
		{"message past the end", good[:len(good)-4], "message length"},
		{"length below a header", withLen(good, 8), "message length 8"},
		{"length past the end", withLen(good, uint32(len(good)+4)), "message length"},
		{"another request's answer", nlmsg(sockDiagByFamily, 2, seq+1, nil), "for request 8"},
		{"interrupted", nlmsg(nlmsgDone, 2|nlmFDumpIntr, seq, []byte{0, 0, 0, 0}), "interrupted"},
		{"error", nlmsg(nlmsgError, 0, seq, errPayload(-int32(syscall.EACCES))), "sock_diag"},
		{"error without code", nlmsg(nlmsgError, 0, seq, []byte{1}), "without its code"},
		{"acknowledgement", nlmsg(nlmsgError, 0, seq, errPayload(0)), "acknowledgement"},
		{"failed done", nlmsg(nlmsgDone, 2, seq, errPayload(-int32(syscall.ENOBUFS))[:4]), "dump failed"},
		{"overrun", nlmsg(nlmsgOverrun, 0, seq, nil), "overrun"},
		{"unknown type", nlmsg(99, 0, seq, nil), "type 99"},
		{"socket message cut short", nlmsg(sockDiagByFamily, 2, seq, make([]byte, inetDiagMsgLen-1)), "71 bytes"},
		{"unknown family", family(1), "address family 1"},
		{"unknown state", state(13), "state 13"},
		{"state zero", state(0), "state 0"},
		{"attribute below its header", attrLen(3), "attribute length 3"},
		{"attribute past the end", attrLen(500), "attribute length 500"},
		{"attribute header cut short", nlmsg(sockDiagByFamily, 2, seq, append(diagMsg(afInet, Established, ap("1.2.3.4:1"), ap("1.2.3.5:2"), 1), 8, 0)), "too few for an attribute"},
	}
	for _, c := range cases {
		// A good message first: nothing of it may come back with the
		// error.
		socks, done, err := parseDump(concat(good, c.b), seq)
		if err == nil || socks != nil || done || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %d sockets, done %v, err %v; want an error with %q and nothing else", c.name, len(socks), done, err, c.want)
		}
	}
	_, _, err := parseDump(nlmsg(nlmsgError, 0, seq, errPayload(-int32(syscall.EACCES))), seq)
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("error message: %v, want EACCES", err)
	}
	_, _, err = parseDump(nlmsg(nlmsgDone, nlmFDumpIntr, seq, nil), seq)
	if !errors.Is(err, errDumpInterrupted) {
		t.Errorf("interrupted dump: %v, want errDumpInterrupted (Read retries it)", err)
	}
}

func TestDumpRequest(t *testing.T) {
	b := dumpRequest(afInet6, 2)
	if len(b) != 72 || ne.Uint32(b) != 72 || ne.Uint16(b[4:]) != 20 || ne.Uint16(b[6:]) != 0x301 || ne.Uint32(b[8:]) != 2 {
		t.Fatalf("header % x", b[:nlmsgHdrLen])
	}
	r := b[nlmsgHdrLen:]
	if r[0] != 10 || r[1] != 6 || r[2] != 2 {
		t.Errorf("family %d, protocol %d, ext %#x; want AF_INET6, IPPROTO_TCP, INET_DIAG_INFO's bit", r[0], r[1], r[2])
	}
	states := ne.Uint32(r[4:])
	for s := Established; s <= NewSynRecv; s++ {
		if want := s != SynSent && s != NewSynRecv; (states&(1<<s) != 0) != want {
			t.Errorf("state %s asked for: %v, want %v", s, !want, want)
		}
	}
}

func TestSplitSockets(t *testing.T) {
	s := splitSockets([]Conn{
		{State: Listen, Local: ap("0.0.0.0:9090")},
		{State: Listen, Local: ap("[::]:8080")},
		{State: Listen, Local: ap("0.0.0.0:8080")},
		{State: Established, Cookie: 1},
		{State: SynSent, Cookie: 2},
		{State: TimeWait, Cookie: 3},
	})
	if !reflect.DeepEqual(s.Listening, []uint16{8080, 9090}) || len(s.Conns) != 2 || s.Conns[0].Cookie != 1 || s.Conns[1].Cookie != 3 {
		t.Errorf("%+v", s)
	}
}

func TestParseSNMP(t *testing.T) {
	const snmp = `Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 3984382
Icmp: InMsgs InErrors
Icmp: 45 0
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 100850 21191 13991 5438 173 3970010 4072019 65267 43 5778 0
Udp: InDatagrams NoPorts
Udp: 1 2
`
	if v, err := parseSNMP([]byte(snmp)); err != nil || v != 21191 {
		t.Errorf("got %d, %v; want 21191", v, err)
	}
	for _, bad := range []string{
		"", "Ip: a\nIp: 1\n", "Tcp: ActiveOpens PassiveOpens\n", "Tcp: ActiveOpens PassiveOpens\nTcp: 1\n",
		"Tcp: ActiveOpens\nTcp: 1\n", "Tcp: PassiveOpens\nTcp: -1\n",
	} {
		if v, err := parseSNMP([]byte(bad)); err == nil {
			t.Errorf("%q: got %d, want an error", bad, v)
		}
	}
}

func TestStateString(t *testing.T) {
	if Established.String() != "ESTABLISHED" || NewSynRecv.String() != "NEW_SYN_RECV" || State(0).String() != "STATE_0" || State(99).String() != "STATE_99" {
		t.Error(Established, NewSynRecv, State(0), State(99))
	}
}

// Answers to exact lookups: each its request's, a socket or gone.
func TestParseAnswers(t *testing.T) {
	errMsg := func(seq uint32, e syscall.Errno) []byte {
		p := make([]byte, 4+nlmsgHdrLen)
		ne.PutUint32(p, uint32(-int32(e)))
		return nlmsg(nlmsgError, 0, seq, p)
	}
	got, err := parseAnswers(concat(
		nlmsg(sockDiagByFamily, 0, 1, diagMsg(afInet, Established, ap("10.1.2.3:8080"), ap("10.9.8.7:51234"), 5)),
		errMsg(2, syscall.ENOENT),
		errMsg(3, syscall.ESTALE),
		nlmsg(sockDiagByFamily, 0, 4, diagMsg(afInet, TimeWait, ap("10.1.2.3:8080"), ap("10.9.8.7:51235"), 6)),
	))
	if err != nil || len(got) != 4 {
		t.Fatalf("parseAnswers: %+v, %v", got, err)
	}
	for i, a := range got {
		if a.seq != uint32(i+1) || a.gone != (i == 1 || i == 2) {
			t.Errorf("answer %d: %+v", i, a)
		}
	}
	if got[0].conn.Cookie != 5 || got[3].conn.State != TimeWait || got[3].conn.key.family != afInet {
		t.Errorf("sockets: %+v, %+v", got[0].conn, got[3].conn)
	}
	for name, b := range map[string][]byte{
		"another error":         errMsg(1, syscall.EPERM),
		"an acknowledgement":    errMsg(1, 0),
		"a dump's end":          nlmsg(nlmsgDone, 0, 1, []byte{0, 0, 0, 0}),
		"a truncated message":   nlmsg(sockDiagByFamily, 0, 1, make([]byte, 10)),
		"a length past the end": nlmsg(sockDiagByFamily, 0, 1, diagMsg(afInet, Established, ap("10.1.2.3:8080"), ap("10.9.8.7:1"), 1))[:40],
	} {
		if got, err := parseAnswers(b); err == nil {
			t.Errorf("%s: %+v, no error", name, got)
		}
	}
}
