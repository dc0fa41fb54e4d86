//go:build linux

package traffic

import (
	"errors"
	"fmt"
	"os"
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
	s := splitSockets(socks)
	if b, err := os.ReadFile(snmpPath); err != nil {
		s.PassiveOpensErr = err
	} else {
		s.PassiveOpens, s.PassiveOpensErr = parseSNMP(b)
	}
	return s, nil
}

// dumpTCP asks the kernel for every TCP socket of the namespace, IPv4 then
// IPv6, on a netlink socket of its own that it always closes.
func dumpTCP() ([]Conn, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkSockDiag)
	if err != nil {
		return nil, fmt.Errorf("opening a sock_diag netlink socket: %w", err)
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("setting the sock_diag socket's receive timeout: %w", err)
	}
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
			// MSG_TRUNC makes the kernel return the datagram's real
			// length, so a datagram larger than buf is caught instead of
			// parsed cut short.
			n, from, err := syscall.Recvfrom(fd, buf, syscall.MSG_TRUNC)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				return nil, fmt.Errorf("sock_diag sent nothing for %s", recvTimeout)
			case err != nil:
				return nil, fmt.Errorf("reading the sock_diag dump: %w", err)
			case n > len(buf):
				return nil, fmt.Errorf("sock_diag sent a datagram of %d bytes, more than the %d read", n, len(buf))
			}
			if nl, ok := from.(*syscall.SockaddrNetlink); !ok || nl.Pid != 0 {
				// Only the kernel (port id 0) answers; anything else is
				// not part of the dump.
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
