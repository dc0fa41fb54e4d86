package traffic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// The netlink and sock_diag numbers this file needs, from linux/netlink.h,
// linux/sock_diag.h and linux/inet_diag.h. They are spelled out rather than
// taken from syscall so that the parser, which is pure, builds and is
// tested on every OS.
const (
	nlmsgHdrLen = 16 // struct nlmsghdr

	nlmsgNoop    = 1
	nlmsgError   = 2
	nlmsgDone    = 3
	nlmsgOverrun = 4

	nlmFRequest  = 0x1
	nlmFDumpIntr = 0x10
	nlmFDump     = 0x300 // NLM_F_ROOT | NLM_F_MATCH

	sockDiagByFamily = 20

	afInet     = 2
	afInet6    = 10
	ipprotoTCP = 6

	inetDiagReqV2Len  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen    = 72 // struct inet_diag_msg
	inetDiagSockIDLen = 48 // struct inet_diag_sockid
	inetDiagInfo      = 2  // INET_DIAG_INFO: the attribute carrying tcp_info
	rtaHdrLen         = 4  // struct rtattr
	nlaTypeMask       = 0x3fff
)

// wantStates is the idiag_states mask of a dump: every state but SYN_SENT
// (an outbound connection still being made) and NEW_SYN_RECV (a handshake
// in progress, which has no socket and no cookie of its own yet; the kernel
// counts it in PassiveOpens only once it becomes one). TIME_WAIT is asked
// for: it is how a connection that opened and closed between two samples is
// still seen, with the cookie it had while open.
const wantStates = 1<<Established | 1<<SynRecv | 1<<FinWait1 | 1<<FinWait2 | 1<<TimeWait |
	1<<Close | 1<<CloseWait | 1<<LastAck | 1<<Listen | 1<<Closing

// Offsets into tcp_info (linux/tcp.h). A field counts only when the struct
// the kernel sent reaches past its end.
const (
	tcpiLastDataRecv  = 52  // __u32, ms
	tcpiBytesReceived = 128 // __u64
	tcpiSegsIn        = 140 // __u32
	tcpiDataSegsIn    = 152 // __u32
)

// errDumpInterrupted is a dump the kernel flagged as inconsistent
// (NLM_F_DUMP_INTR): the socket tables changed under it, so it is taken
// again.
var errDumpInterrupted = errors.New("the kernel interrupted the socket dump")

// ne is the byte order of netlink's own fields: the host's. The addresses
// and ports inside inet_diag_sockid are network order instead.
var ne = binary.NativeEndian

// dumpRequest is the message asking for every TCP socket of one address
// family, with its tcp_info.
func dumpRequest(family uint8, seq uint32) []byte {
	b := make([]byte, nlmsgHdrLen+inetDiagReqV2Len)
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], sockDiagByFamily)
	ne.PutUint16(b[6:], nlmFRequest|nlmFDump)
	ne.PutUint32(b[8:], seq)
	// nlmsg_pid 0: the kernel fills in this socket's port id.
	r := b[nlmsgHdrLen:]
	r[0] = family
	r[1] = ipprotoTCP
	r[2] = 1 << (inetDiagInfo - 1) // idiag_ext is a bitmask of attributes, starting at 1
	ne.PutUint32(r[4:], wantStates)
	// The socket id stays zero: a dump ignores it.
	return b
}

// lookupKey is what asks the kernel for one socket again (exactRequest):
// its address family and its struct inet_diag_sockid as the kernel sent it
// (addresses as the socket holds them, IPv4-mapped or not, its interface and
// its cookie, which makes a socket that closed, or another on the same
// addresses, not match).
type lookupKey struct {
	family uint8
	id     [inetDiagSockIDLen]byte
}

// exactRequest is the message asking for the one socket k names, with its
// tcp_info: no NLM_F_DUMP, so the kernel looks it up by its addresses in
// its hash table instead of walking the table. The answer is the socket's
// message, or an error (ENOENT when it is gone).
func exactRequest(k lookupKey, seq uint32) []byte {
	b := make([]byte, nlmsgHdrLen+inetDiagReqV2Len)
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], sockDiagByFamily)
	ne.PutUint16(b[6:], nlmFRequest)
	ne.PutUint32(b[8:], seq)
	r := b[nlmsgHdrLen:]
	r[0] = k.family
	r[1] = ipprotoTCP
	r[2] = 1 << (inetDiagInfo - 1)
	ne.PutUint32(r[4:], wantStates)
	copy(r[8:], k.id[:])
	return b
}

// answer is the kernel's answer to one exact request: the socket, or that
// it is gone.
type answer struct {
	seq  uint32
	conn Conn
	gone bool
}

// parseAnswers reads one datagram of answers to exact requests, each
// message its request's (by seq). ENOENT and ESTALE say that the socket
// is gone (closed and freed, or the addresses now another socket's); any
// other error, or anything malformed, fails the datagram.
func parseAnswers(b []byte) ([]answer, error) {
	var out []answer
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return nil, fmt.Errorf("netlink: %d bytes left, too few for a message header", len(b))
		}
		n := ne.Uint32(b[0:])
		if n < nlmsgHdrLen || uint64(n) > uint64(len(b)) {
			return nil, fmt.Errorf("netlink: message length %d, with %d bytes left", n, len(b))
		}
		a := answer{seq: ne.Uint32(b[8:])}
		payload := b[nlmsgHdrLen:n]
		switch typ := ne.Uint16(b[4:]); typ {
		case nlmsgNoop:
			b = b[min(align4(int(n)), len(b)):]
			continue
		case nlmsgError:
			if len(payload) < 4 {
				return nil, errors.New("netlink: error message without its code")
			}
			code := int32(ne.Uint32(payload))
			switch e := syscall.Errno(-code); {
			case code >= 0:
				return nil, errors.New("netlink: unexpected acknowledgement of a socket lookup")
			case e == syscall.ENOENT || e == syscall.ESTALE:
				a.gone = true
			default:
				return nil, fmt.Errorf("sock_diag: looking a socket up: %w", e)
			}
		case sockDiagByFamily:
			c, err := parseDiagMsg(payload)
			if err != nil {
				return nil, err
			}
			a.conn = c
		default:
			return nil, fmt.Errorf("netlink: unexpected message type %d answering a socket lookup", typ)
		}
		out = append(out, a)
		b = b[min(align4(int(n)), len(b)):]
	}
	return out, nil
}

// parseDump reads one datagram of a sock_diag dump answering request seq:
// the sockets it lists, and whether it ends the dump (NLMSG_DONE). A dump
// spans several datagrams; the caller reads until done. Any malformed part
// (a length past the end, a message shorter than its struct, another
// request's answer, an unknown message or address family) fails the whole
// datagram, and then no socket is returned: half a reading would look like
// connections that vanished.
func parseDump(b []byte, seq uint32) (socks []Conn, done bool, err error) {
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return nil, false, fmt.Errorf("netlink: %d bytes left, too few for a message header", len(b))
		}
		n := ne.Uint32(b[0:])
		typ := ne.Uint16(b[4:])
		flags := ne.Uint16(b[6:])
		if n < nlmsgHdrLen || uint64(n) > uint64(len(b)) {
			return nil, false, fmt.Errorf("netlink: message length %d, with %d bytes left", n, len(b))
		}
		if got := ne.Uint32(b[8:]); got != seq {
			return nil, false, fmt.Errorf("netlink: message for request %d while reading request %d", got, seq)
		}
		if flags&nlmFDumpIntr != 0 {
			return nil, false, errDumpInterrupted
		}
		payload := b[nlmsgHdrLen:n]
		switch typ {
		case nlmsgNoop:
		case nlmsgError:
			if len(payload) < 4 {
				return nil, false, errors.New("netlink: error message without its code")
			}
			if code := int32(ne.Uint32(payload)); code < 0 {
				return nil, false, fmt.Errorf("sock_diag: %w", syscall.Errno(-code))
			}
			// A zero code is an acknowledgement, which a dump not asking
			// for one never gets: better to say so than to stop early.
			return nil, false, errors.New("netlink: unexpected acknowledgement in a dump")
		case nlmsgDone:
			if len(payload) >= 4 {
				if code := int32(ne.Uint32(payload)); code < 0 {
					return nil, false, fmt.Errorf("sock_diag: dump failed: %w", syscall.Errno(-code))
				}
			}
			// What follows NLMSG_DONE is not part of the dump.
			return socks, true, nil
		case nlmsgOverrun:
			return nil, false, errors.New("netlink: the kernel dropped part of the dump (overrun)")
		case sockDiagByFamily:
			c, err := parseDiagMsg(payload)
			if err != nil {
				return nil, false, err
			}
			socks = append(socks, c)
		default:
			return nil, false, fmt.Errorf("netlink: unexpected message type %d in a sock_diag dump", typ)
		}
		// Messages are padded to 4 bytes; the last one of a datagram
		// may end without its padding.
		b = b[min(align4(int(n)), len(b)):]
	}
	return socks, false, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// parseDiagMsg reads one struct inet_diag_msg and its attributes.
func parseDiagMsg(p []byte) (Conn, error) {
	if len(p) < inetDiagMsgLen {
		return Conn{}, fmt.Errorf("sock_diag: socket message of %d bytes, want at least %d", len(p), inetDiagMsgLen)
	}
	var c Conn
	c.State = State(p[1])
	if c.State < Established || c.State > NewSynRecv {
		return Conn{}, fmt.Errorf("sock_diag: unknown TCP state %d", p[1])
	}
	// inet_diag_sockid starts at 4: ports and addresses in network
	// order, then the interface and the cookie in host order.
	id := p[4:52]
	sport := binary.BigEndian.Uint16(id[0:])
	dport := binary.BigEndian.Uint16(id[2:])
	var src, dst netip.Addr
	switch p[0] {
	case afInet:
		src = netip.AddrFrom4([4]byte(id[4:8]))
		dst = netip.AddrFrom4([4]byte(id[20:24]))
	case afInet6:
		src = netip.AddrFrom16([16]byte(id[4:20])).Unmap()
		dst = netip.AddrFrom16([16]byte(id[20:36])).Unmap()
	default:
		return Conn{}, fmt.Errorf("sock_diag: unknown address family %d", p[0])
	}
	c.Local = netip.AddrPortFrom(src, sport)
	c.Remote = netip.AddrPortFrom(dst, dport)
	c.Cookie = uint64(ne.Uint32(id[40:])) | uint64(ne.Uint32(id[44:]))<<32
	c.key.family = p[0]
	copy(c.key.id[:], id)

	for a := p[inetDiagMsgLen:]; len(a) > 0; {
		if len(a) < rtaHdrLen {
			return Conn{}, fmt.Errorf("sock_diag: %d bytes left, too few for an attribute", len(a))
		}
		n := int(ne.Uint16(a[0:]))
		if n < rtaHdrLen || n > len(a) {
			return Conn{}, fmt.Errorf("sock_diag: attribute length %d, with %d bytes left", n, len(a))
		}
		if ne.Uint16(a[2:])&nlaTypeMask == inetDiagInfo {
			c.Info = parseTCPInfo(a[rtaHdrLen:n])
		}
		a = a[min(align4(n), len(a)):]
	}
	return c, nil
}

// parseTCPInfo reads the fields this package uses from a struct tcp_info of
// whatever length the kernel sent: a field past the end is unknown.
func parseTCPInfo(b []byte) Info {
	var in Info
	if len(b) >= tcpiLastDataRecv+4 {
		in.LastDataRecv = time.Duration(ne.Uint32(b[tcpiLastDataRecv:])) * time.Millisecond
		in.HasLastDataRecv = true
	}
	if len(b) >= tcpiBytesReceived+8 {
		in.BytesReceived = ne.Uint64(b[tcpiBytesReceived:])
		in.HasBytesReceived = true
	}
	if len(b) >= tcpiSegsIn+4 {
		in.SegsIn = ne.Uint32(b[tcpiSegsIn:])
		in.HasSegsIn = true
	}
	if len(b) >= tcpiDataSegsIn+4 {
		in.DataSegsIn = ne.Uint32(b[tcpiDataSegsIn:])
		in.HasDataSegsIn = true
	}
	return in
}
