package api

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Traffic is the agent's summary of the inbound TCP traffic its pod received
// while the agent watched, as of the moment it asks: the evidence the server
// weighs against a route's tail. Times are ages before that moment, so the
// agent's and the server's clocks never meet.
//
// An arrival is one burst of bytes received on one inbound connection
// between two of the agent's samples (a request, as far as the agent can
// tell), or a new inbound connection. Several requests on one connection
// between two samples count as one, which makes the rates of a fit of
// single arrivals lower, never higher: its quiet bounds only get longer.
//
// An agent that sets Every counts at most one arrival per source and look
// (sample): a source's arrivals are then the looks that found data from it,
// which the server fits as such, so that a busy source no longer saturates
// its rate.
//
// A nil *Traffic is no evidence (an agent that cannot see its sockets, or an
// older agent); the server then relies on tails alone.
type Traffic struct {
	// Watched is how long the agent has been sampling.
	Watched time.Duration
	// Every is the mean time between the agent's looks (samples) when its
	// sources count at most one arrival per look, else zero. It travels
	// in its own query parameter (DrainRequest.URL), which an older server
	// ignores: to it the summary is a valid one with fewer arrivals, which
	// only lengthens its bounds.
	Every time.Duration
	// Sources is per remote address and local port, at most
	// MaxTrafficSources, the busiest kept.
	Sources []SourceTraffic
	// Unknown counts arrivals the agent could not attribute: connections
	// that opened (the namespace's passive-open counter rose) and closed
	// between two samples, whose port and source are unknown; and, when
	// Sources is at MaxTrafficSources, the arrivals of the sources left
	// out. The server weighs it as a source only in that second case.
	// Port is zero.
	Unknown SourceTraffic
	// Gateways are the pod's default gateways (from its routing table): on
	// bridge networks the node's side of the pod's link, where kubelet
	// probes come from. The server counts them as the node's addresses. At
	// most MaxTrafficGateways.
	Gateways []netip.Addr
	// NewConns is, for the sources in Sources that opened a new inbound
	// connection while the agent watched, the looks that first saw one
	// (the same (Addr, Port), in Sources' order, each summarised as a
	// source is): a subset of the source's arrivals, each at that look's
	// arrival time. Bytes on a connection already open are no new routing:
	// an AWS NLB keeps passing a draining target the flows it had, and an
	// HTTP/2 or gRPC stream stays open, while only a new connection says a
	// load balancer node still sends the pod new flows. Open is zero.
	// Unknown has no counterpart: its unseen opens are new connections
	// already, and the left-out sources' arrivals count whole there.
	NewConns []SourceTraffic
	// ConnsCounted says the agent counted NewConns and the sources' Open:
	// false from an older agent, whose NewConns is nil and Open zero
	// whatever its pod received. With it, a source without an entry in
	// NewConns opened no connection since the watch began. Both travel in
	// their own query parameter beside Every's (DrainRequest.URL), which
	// an older server ignores.
	ConnsCounted bool
}

// SourceTraffic is what one remote address sent to one local port.
type SourceTraffic struct {
	Addr netip.Addr // zero for Traffic.Unknown
	Port uint16     // the pod's own (local) port; zero for Traffic.Unknown
	// Arrivals counts arrivals while the agent watched.
	Arrivals int
	// First is the age of the first arrival counted; Last the ages of the
	// latest ones, the most recent first, at most MaxTrafficAges.
	First time.Duration
	Last  []time.Duration
	// MaxGap is the longest pause between two consecutive arrivals
	// counted (zero with one arrival): it keeps a bursty source from
	// passing for a steady one whose pause means it stopped.
	MaxGap time.Duration
	// Looks and RecentLooks are what an agent that sets Traffic.Every
	// counts of its looks at the source: over all its arrivals, and over
	// the latest ones (those in Last). Zero: not counted (an older agent,
	// Traffic.Unknown). They travel in their own query parameter
	// (DrainRequest.URL), which an older server ignores.
	Looks, RecentLooks Looks
	// Gaps is what an agent that counts its looks saw of the source's
	// gaps: between each two consecutive looks that found data, how many
	// looks apart they were (1: the next look), binned by powers of two
	// (GapBins). It lets the server weigh the long gaps on their own (a
	// source sending bursts between pauses has a few long gaps among many
	// short ones, which the counts of Looks cannot tell from a steady
	// source's). Nil: not counted (an older agent, Traffic.Unknown). It
	// travels in its own query parameter, which an older server ignores.
	Gaps []GapBin
	// Open is how many inbound connections from the source were
	// established (open both ways) at the agent's latest look, counted
	// when Traffic.ConnsCounted: the flows a load balancer still keeps to
	// the pod. Zero in NewConns and Traffic.Unknown.
	Open int
}

// GapBins is how many bins SourceTraffic.Gaps has: bin j holds the gaps of
// 2^j to 2^(j+1) − 1 looks, the last one every longer gap too.
const GapBins = 8

// GapBin counts the gaps of one bin and sums their lengths, in looks.
type GapBin struct {
	N, Sum int
}

// GapBinOf is the bin of a gap of g ≥ 1 looks.
func GapBinOf(g int) int {
	j := 0
	for g > 1 && j < GapBins-1 {
		g >>= 1
		j++
	}
	return j
}

// Looks counts an agent's looks at one source over a stretch of its
// arrivals: the server weighs how regular the source is with them.
type Looks struct {
	// N is the looks after the one that found the stretch's first arrival,
	// up to the one that found its latest: the arrivals less one, and the
	// looks that found nothing between them.
	N int
	// Pauses is how many runs of looks that found nothing there were
	// among them.
	Pauses int
}

// Bounds of a Traffic summary, so that a query string stays small (at
// every bound at once about 14 KB, well under the 64 KiB of headers the
// gate server accepts) and the server's work per ask stays bounded.
const (
	MaxTrafficSources  = 32
	MaxTrafficAges     = 16
	MaxTrafficGateways = 4
)

// trafficVersion leads the encoding; a server refuses other versions so
// that a later agent's change of meaning is never misread.
const trafficVersion = "1"

// EncodeTraffic writes t for the drain request's "traffic" query parameter:
//
//	1;w=<watched ms>;s=<addr>,<port>,<arrivals>,<first ms>,<max gap ms>,<age ms>.<age ms>...;u=<arrivals>,<first ms>,<max gap ms>,<ages>;g=<addr>...
//
// Durations are whole milliseconds. Sources past MaxTrafficSources and ages
// past MaxTrafficAges are dropped.
func EncodeTraffic(t *Traffic) string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(trafficVersion)
	b.WriteString(";w=")
	b.WriteString(ms(t.Watched))
	for i, s := range t.Sources {
		if i == MaxTrafficSources {
			break
		}
		b.WriteString(";s=")
		b.WriteString(s.Addr.String())
		b.WriteString(",")
		b.WriteString(strconv.Itoa(int(s.Port)))
		b.WriteString(",")
		writeArrivals(&b, s)
	}
	if t.Unknown.Arrivals > 0 {
		b.WriteString(";u=")
		writeArrivals(&b, t.Unknown)
	}
	for i, g := range t.Gateways {
		if i == MaxTrafficGateways {
			break
		}
		b.WriteString(";g=")
		b.WriteString(g.String())
	}
	return b.String()
}

func writeArrivals(b *strings.Builder, s SourceTraffic) {
	b.WriteString(strconv.Itoa(s.Arrivals))
	b.WriteString(",")
	b.WriteString(ms(s.First))
	b.WriteString(",")
	b.WriteString(ms(s.MaxGap))
	b.WriteString(",")
	for i, a := range s.Last {
		if i == MaxTrafficAges {
			break
		}
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(ms(a))
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(max(d, 0).Milliseconds(), 10) }

// maxTrafficMillis bounds every duration the server accepts: a week.
const maxTrafficMillis = 7 * 24 * 3600 * 1000

// ParseTraffic reads what EncodeTraffic wrote. Its errors are *RequestError
// with status 400. It checks the summary is consistent: ages within the
// watched time, the latest ages most recent first and no older than First,
// the longest gap within the span,
// no more ages than arrivals, no source twice, within the bounds above.
func ParseTraffic(s string) (*Traffic, error) {
	if len(s) > 8<<10 {
		return nil, badRequest("traffic is %d bytes: at most %d", len(s), 8<<10)
	}
	parts := strings.Split(s, ";")
	if parts[0] != trafficVersion {
		return nil, badRequest("traffic version %s is not understood: want %s", Quote(parts[0], maxQuoted), trafficVersion)
	}
	if len(parts) < 2 || !strings.HasPrefix(parts[1], "w=") {
		return nil, badRequest("traffic has no watched time (w=)")
	}
	w, err := millis(parts[1][2:])
	if err != nil {
		return nil, badRequest("traffic watched time: %v", err)
	}
	t := &Traffic{Watched: w}
	seen := map[netip.AddrPort]bool{}
	unknown := false
	for _, p := range parts[2:] {
		switch {
		case strings.HasPrefix(p, "s="):
			if len(t.Sources) == MaxTrafficSources {
				return nil, badRequest("traffic has more than %d sources", MaxTrafficSources)
			}
			f := strings.SplitN(p[2:], ",", 3)
			if len(f) != 3 {
				return nil, badRequest("traffic source %s: want addr,port,arrivals,first,gap,ages", Quote(p, maxQuoted))
			}
			addr, err := netip.ParseAddr(f[0])
			if err != nil || addr.Zone() != "" {
				return nil, badRequest("traffic source address %s is not an IP address", Quote(f[0], maxQuoted))
			}
			addr = addr.Unmap()
			port, err := strconv.ParseUint(f[1], 10, 16)
			if !digits(f[1]) || err != nil || port == 0 {
				return nil, badRequest("traffic source port %s is not a port number", Quote(f[1], maxQuoted))
			}
			key := netip.AddrPortFrom(addr, uint16(port))
			if seen[key] {
				return nil, badRequest("traffic source %s is given twice", key)
			}
			seen[key] = true
			st, err := parseArrivals(f[2], w)
			if err != nil {
				return nil, badRequest("traffic source %s: %v", key, err)
			}
			st.Addr, st.Port = addr, uint16(port)
			t.Sources = append(t.Sources, st)
		case strings.HasPrefix(p, "u="):
			if unknown {
				return nil, badRequest("traffic gives unknown arrivals twice")
			}
			unknown = true
			st, err := parseArrivals(p[2:], w)
			if err != nil {
				return nil, badRequest("traffic unknown arrivals: %v", err)
			}
			t.Unknown = st
		case strings.HasPrefix(p, "g="):
			if len(t.Gateways) == MaxTrafficGateways {
				return nil, badRequest("traffic has more than %d gateways", MaxTrafficGateways)
			}
			g, err := netip.ParseAddr(p[2:])
			if err != nil || g.Zone() != "" {
				return nil, badRequest("traffic gateway %s is not an IP address", Quote(p[2:], maxQuoted))
			}
			t.Gateways = append(t.Gateways, g.Unmap())
		default:
			return nil, badRequest("traffic part %s is not s=, u= nor g=", Quote(p, maxQuoted))
		}
	}
	return t, nil
}

func parseArrivals(s string, watched time.Duration) (SourceTraffic, error) {
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return SourceTraffic{}, fmt.Errorf("want arrivals,first,gap,ages")
	}
	n, err := strconv.Atoi(f[0])
	if !digits(f[0]) || err != nil || n < 1 || n > 1<<30 {
		return SourceTraffic{}, fmt.Errorf("arrivals %s is not a count from 1", Quote(f[0], maxQuoted))
	}
	st := SourceTraffic{Arrivals: n}
	if st.First, err = millis(f[1]); err != nil {
		return SourceTraffic{}, fmt.Errorf("first: %v", err)
	}
	if st.First > watched {
		return SourceTraffic{}, fmt.Errorf("first arrival %s ago is before the watch began %s ago", st.First, watched)
	}
	if st.MaxGap, err = millis(f[2]); err != nil {
		return SourceTraffic{}, fmt.Errorf("gap: %v", err)
	}
	if st.MaxGap > st.First {
		return SourceTraffic{}, fmt.Errorf("longest gap %s is longer than the arrivals' span", st.MaxGap)
	}
	if f[3] == "" {
		return SourceTraffic{}, fmt.Errorf("no ages of latest arrivals")
	}
	ages := strings.Split(f[3], ".")
	if len(ages) > MaxTrafficAges || len(ages) > n {
		return SourceTraffic{}, fmt.Errorf("%d ages for %d arrivals (at most %d)", len(ages), n, MaxTrafficAges)
	}
	prev := time.Duration(-1)
	for _, a := range ages {
		d, err := millis(a)
		if err != nil {
			return SourceTraffic{}, fmt.Errorf("age: %v", err)
		}
		if d < prev || d > st.First {
			return SourceTraffic{}, fmt.Errorf("ages must grow from the latest arrival to at most the first's")
		}
		prev = d
		st.Last = append(st.Last, d)
	}
	return st, nil
}

func millis(s string) (time.Duration, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if !digits(s) || err != nil || v > maxTrafficMillis {
		return 0, fmt.Errorf("%s is not milliseconds from 0 to a week", Quote(s, maxQuoted))
	}
	return time.Duration(v) * time.Millisecond, nil
}

// digits reports whether s is a number as EncodeTraffic writes one: decimal
// digits, no sign, no leading zero.
func digits(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
