package traffic

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Snapshot is one reading of the namespace's TCP sockets.
type Snapshot struct {
	// Listening is the local ports of the listening sockets, ascending,
	// each once.
	Listening []uint16
	// Conns is every other socket the dump listed (see Read).
	Conns []Conn
	// PassiveOpens is the namespace's TCP PassiveOpens counter: how many
	// connections its listeners have accepted so far. PassiveOpensErr says
	// why it could not be read; PassiveOpens is then zero and unused.
	PassiveOpens    uint64
	PassiveOpensErr error
}

// State is a TCP socket's state as the kernel numbers it (linux/tcp.h's
// TCP_ESTABLISHED…).
type State uint8

// The states, numbered as the kernel does.
const (
	Established State = 1 + iota
	SynSent
	SynRecv
	FinWait1
	FinWait2
	TimeWait
	Close
	CloseWait
	LastAck
	Listen
	Closing
	NewSynRecv
)

var stateNames = [...]string{"", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
	"TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV"}

func (s State) String() string {
	if s > 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "STATE_" + strconv.Itoa(int(s))
}

// peerClosed reports whether a socket in state s has received its peer's
// FIN. The kernel counts the FIN's sequence number in tcpi_bytes_received,
// so a socket entering one of these states grew by one byte that is no
// data.
func (s State) peerClosed() bool {
	return s == CloseWait || s == LastAck || s == Closing || s == TimeWait
}

// Conn is one connected TCP socket.
type Conn struct {
	// Cookie is the kernel's socket cookie: unique while the namespace
	// lives, and kept when the socket moves to TIME_WAIT.
	Cookie uint64
	State  State
	// Local and Remote are this end's and the peer's address and port,
	// IPv4-mapped IPv6 addresses unmapped.
	Local, Remote netip.AddrPort
	Info          Info
	// key asks the kernel for this socket again (Reader); zero when it
	// did not come from the kernel.
	key lookupKey
}

// Info is what the socket's tcp_info said about received data. A Has flag is
// false when the kernel sent no tcp_info (TIME_WAIT sockets keep none) or a
// struct too short to hold that field (older kernels): unknown, not zero.
type Info struct {
	// BytesReceived is tcpi_bytes_received (Linux 4.1): sequence space
	// received, the peer's FIN included.
	BytesReceived    uint64
	HasBytesReceived bool
	// DataSegsIn is tcpi_data_segs_in (4.6): segments that carried data.
	DataSegsIn    uint32
	HasDataSegsIn bool
	// SegsIn is tcpi_segs_in (4.2): every segment received, bare
	// acknowledgements included.
	SegsIn    uint32
	HasSegsIn bool
	// LastDataRecv is tcpi_last_data_recv: how long ago data last arrived,
	// or the connection was established if no data has.
	LastDataRecv    time.Duration
	HasLastDataRecv bool
}

// splitSockets turns a dump's sockets into a Snapshot's listening ports and
// connections.
func splitSockets(socks []Conn) Snapshot {
	var s Snapshot
	for _, c := range socks {
		switch c.State {
		case Listen:
			s.Listening = append(s.Listening, c.Local.Port())
		case SynSent, NewSynRecv:
			// Not asked for; a kernel that sends them anyway is not
			// telling about a connection this package counts.
		default:
			s.Conns = append(s.Conns, c)
		}
	}
	slices.Sort(s.Listening)
	s.Listening = slices.Compact(s.Listening)
	return s
}

// snmpPath is the reading process's own namespace's counters: /proc/net is
// a link to /proc/self/net.
const snmpPath = "/proc/net/snmp"

// parseSNMP reads the TCP PassiveOpens counter from the text of
// /proc/net/snmp, where each protocol has a line of names ("Tcp: RtoAlgorithm
// … PassiveOpens …") followed by a line of values in the same order.
func parseSNMP(b []byte) (uint64, error) {
	var header []string
	for line := range bytes.Lines(b) {
		fields := strings.Fields(string(line))
		if len(fields) == 0 || fields[0] != "Tcp:" {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		if len(fields) != len(header) {
			return 0, fmt.Errorf("the Tcp: lines of %s have %d names and %d values", snmpPath, len(header), len(fields))
		}
		i := slices.Index(header, "PassiveOpens")
		if i < 0 {
			return 0, fmt.Errorf("%s has no Tcp: PassiveOpens", snmpPath)
		}
		v, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s Tcp: PassiveOpens %q is not a count", snmpPath, fields[i])
		}
		return v, nil
	}
	if header == nil {
		return 0, errors.New(snmpPath + " has no Tcp: lines")
	}
	return 0, errors.New(snmpPath + " has a Tcp: header line without values")
}
