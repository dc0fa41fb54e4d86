//go:build linux

package traffic

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

const (
	// recvTimeout bounds each wait for the kernel's next datagram, and
	// readBudget the whole dump: a sample that cannot finish in time is a
	// failure, never a hang of the agent.
	recvTimeout = 500 * time.Millisecond
	readBudget  = time.Second
	// maxSockets bounds one snapshot, and so the memory of the watcher
	// that remembers it: a namespace with more TCP sockets than this is
	// not one the agent can summarise per connection.
	maxSockets = 1 << 16
	// dumpTries is how often an interrupted dump is taken again.
	dumpTries = 3
	// netlinkSockDiag is NETLINK_SOCK_DIAG, which package syscall knows
	// only by its old name NETLINK_INET_DIAG.
	netlinkSockDiag = 4
)

// bufPool keeps the receive buffers between samples: the agent samples ten
// times a second, and 64 KiB each time would be needless garbage. The
// kernel sends dump datagrams of at most 32 KiB.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// Read takes one snapshot of the TCP sockets of the network namespace the
// calling process is in, and its PassiveOpens counter. Its error is the
// dump's; a counter that cannot be read is only noted in the snapshot's
// PassiveOpensErr.
func Read() (Snapshot, error) {
	s, err := dumpSnapshot()
	if err != nil {
		return Snapshot{}, err
	}
	s.PassiveOpens, s.PassiveOpensErr = passiveOpens()
	return s, nil
}

// dumpSnapshot is a dump's sockets as a Snapshot, without the counter.
func dumpSnapshot() (Snapshot, error) {
	var (
		socks []Conn
		err   error
	)
	for range dumpTries {
		if socks, err = dumpTCP(); !errors.Is(err, errDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return Snapshot{}, err
	}
	return splitSockets(socks), nil
}

func passiveOpens() (uint64, error) {
	b, err := os.ReadFile(snmpPath)
	if err != nil {
		return 0, err
	}
	return parseSNMP(b)
}

// Reader takes the same snapshots as Read, look after look, at a cost that
// follows the namespace's own connections instead of the node's.
//
// A dump is not cheap however few sockets a namespace has: the kernel keeps
// one TCP hash table for every namespace of the node, sized by the node's
// memory (262,144 buckets on a 24 GiB node), and a dump walks all of it,
// twice (IPv4, then IPv6), to pick out this namespace's sockets. Ten looks
// a second cost some 47 ms of CPU a second that way, nearly all in the
// kernel. So a Reader dumps only when the namespace may have a connection
// it does not know: at its first look, when the namespace's PassiveOpens
// counter moved (an inbound connection was accepted, however briefly; it is
// read before the dump, so none slips between), when the counter cannot be
// read, after a failed look, and every dumpEvery whatever happens. Between
// dumps it asks the kernel for each connection it knows by its addresses
// and cookie, a hash lookup each: what it gets is what a dump would list
// for those sockets (a socket gone from the table is gone from the
// snapshot, one in TIME_WAIT is listed so). Outbound connections opened
// since the last dump are missing until the next: the watcher does not
// count them (only connections to a listening port are traffic).
//
// A Reader is not safe for concurrent use.
type Reader struct {
	listening []uint16
	conns     []Conn
	opens     uint64
	dumpedAt  time.Time
	cached    bool
	// counter reads PassiveOpens: passiveOpens, or a test's.
	counter func() (uint64, error)
	// Dumps and Lookups count the looks of each kind, for tests and logs.
	Dumps, Lookups int
}

const (
	// dumpEvery is the longest a Reader goes without a dump.
	dumpEvery = 10 * time.Second
	// maxLookups is the most connections a Reader looks up one by one:
	// past it, a dump costs less.
	maxLookups = 1024
	// lookupBatch is how many lookups go to the kernel in one datagram,
	// so that their answers fit the socket's receive buffer.
	lookupBatch = 32
)

// NewReader returns a Reader whose first look is a dump.
func NewReader() *Reader { return &Reader{counter: passiveOpens} }

// Read takes one snapshot (see Read and Reader).
func (r *Reader) Read() (Snapshot, error) {
	opens, oerr := r.counter()
	if r.cached && oerr == nil && opens == r.opens && len(r.conns) <= maxLookups && time.Since(r.dumpedAt) < dumpEvery {
		conns, err := lookupTCP(r.conns)
		if err == nil {
			r.conns = conns
			r.Lookups++
			return Snapshot{Listening: slices.Clone(r.listening), Conns: slices.Clone(conns), PassiveOpens: opens}, nil
		}
		// A failed lookup is not a failed look: the dump decides.
	}
	r.cached = false
	s, err := dumpSnapshot()
	if err != nil {
		return Snapshot{}, err
	}
	r.Dumps++
	s.PassiveOpens, s.PassiveOpensErr = opens, oerr
	r.listening, r.conns = slices.Clone(s.Listening), slices.Clone(s.Conns)
	r.opens, r.dumpedAt, r.cached = opens, time.Now(), oerr == nil
	return s, nil
}

// lookupTCP asks the kernel for each of conns again, by its key: the
// sockets still there, as they are now, in the same order.
func lookupTCP(conns []Conn) ([]Conn, error) {
	fd, err := openDiag()
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	deadline := time.Now().Add(readBudget)
	out := make([]Conn, 0, len(conns))
	for start := 0; start < len(conns); start += lookupBatch {
		batch := conns[start:min(start+lookupBatch, len(conns))]
		var req []byte
		for i, c := range batch {
			if c.key.family == 0 {
				return nil, fmt.Errorf("connection %s <- %s has no key to look it up by", c.Local, c.Remote)
			}
			req = append(req, exactRequest(c.key, uint32(start+i+1))...)
		}
		if err := syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
			return nil, fmt.Errorf("looking up TCP sockets: %w", err)
		}
		for got := 0; got < len(batch); {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("looking up %d TCP sockets took more than %s", len(conns), readBudget)
			}
			n, ok, err := recvKernel(fd, buf)
			switch {
			case errors.Is(err, errNoAnswer):
				return nil, fmt.Errorf("sock_diag answered %d of %d lookups in %s", got, len(batch), recvTimeout)
			case err != nil:
				return nil, fmt.Errorf("reading sock_diag's answers: %w", err)
			case !ok:
				continue
			}
			answers, err := parseAnswers(buf[:n])
			if err != nil {
				return nil, err
			}
			for _, a := range answers {
				if want := uint32(start + got + 1); a.seq != want {
					return nil, fmt.Errorf("sock_diag answered lookup %d where %d was next", a.seq, want)
				}
				got++
				if !a.gone {
					out = append(out, a.conn)
				}
			}
		}
	}
	return out, nil
}

// openDiag opens a sock_diag netlink socket with a receive timeout; the
// caller closes it.
func openDiag() (int, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return -1, fmt.Errorf("opening a sock_diag netlink socket: %w", err)
	}
	tv := syscall.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("setting the sock_diag socket's receive timeout: %w", err)
	}
	return fd, nil
}

// errNoAnswer is a receive that timed out (recvTimeout).
var errNoAnswer = errors.New("no answer")

// recvKernel receives one datagram into buf: its length, and ok false when
// it is nothing to read (an interrupted call, or not from the kernel, port
// id 0, which alone answers). MSG_TRUNC makes the kernel return the
// datagram's real length, so a datagram larger than buf is an error
// instead of parsed cut short.
func recvKernel(fd int, buf []byte) (n int, ok bool, err error) {
	n, from, err := syscall.Recvfrom(fd, buf, syscall.MSG_TRUNC)
	switch {
	case errors.Is(err, syscall.EINTR):
		return 0, false, nil
	case errors.Is(err, syscall.EAGAIN):
		return 0, false, errNoAnswer
	case err != nil:
		return 0, false, err
	case n > len(buf):
		return 0, false, fmt.Errorf("sock_diag sent a datagram of %d bytes, more than the %d read", n, len(buf))
	}
	if nl, isNL := from.(*syscall.SockaddrNetlink); !isNL || nl.Pid != 0 {
		return 0, false, nil
	}
	return n, true, nil
}

// dumpTCP asks the kernel for every TCP socket of the namespace, IPv4 then
// IPv6, on a netlink socket of its own that it always closes.
func dumpTCP() ([]Conn, error) {
	fd, err := openDiag()
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	deadline := time.Now().Add(readBudget)

	var socks []Conn
	for i, family := range []uint8{afInet, afInet6} {
		seq := uint32(i + 1)
		if err := syscall.Sendto(fd, dumpRequest(family, seq), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
			return nil, fmt.Errorf("asking sock_diag for TCP sockets: %w", err)
		}
		for done := false; !done; {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("the sock_diag dump took more than %s", readBudget)
			}
			n, ok, err := recvKernel(fd, buf)
			switch {
			case errors.Is(err, errNoAnswer):
				return nil, fmt.Errorf("sock_diag sent nothing for %s", recvTimeout)
			case err != nil:
				return nil, fmt.Errorf("reading the sock_diag dump: %w", err)
			case !ok:
				continue
			}
			var part []Conn
			part, done, err = parseDump(buf[:n], seq)
			if err != nil {
				return nil, err
			}
			if len(socks)+len(part) > maxSockets {
				return nil, fmt.Errorf("the namespace has more than %d TCP sockets", maxSockets)
			}
			socks = append(socks, part...)
		}
	}
	return socks, nil
}
