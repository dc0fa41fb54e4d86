// Package traffic is the preStop agent's eye on its own pod's inbound TCP
// traffic: it reads the TCP sockets of the network namespace it runs in (the
// pod's, since a preStop hook runs inside the pod) and turns a series of such
// readings into the api.Traffic summary the agent sends with each ask. The
// gate server decides what the evidence means; this package only counts, and
// wherever it cannot tell, it counts so that traffic looks more recent, never
// less.
//
// # Reading
//
// Read takes one snapshot: a NETLINK_SOCK_DIAG dump of the namespace's TCP
// sockets, IPv4 and IPv6, with each socket's tcp_info, plus the namespace's
// TCP PassiveOpens counter from /proc/net/snmp. It lists the listening ports
// and every connected socket (all states but SYN_SENT, which is an outbound
// connection not yet made, and NEW_SYN_RECV, a handshake the kernel has not
// turned into a socket yet) with its addresses, its socket cookie and what
// its tcp_info says about received data. Older kernels send a shorter
// tcp_info; a field past its end is unknown, never zero (see Info).
//
// # What counts as an arrival
//
// A Watcher samples again and again and counts arrivals:
//
//   - An inbound connection is a connected socket whose local port was a
//     listening port of the namespace (at any sample) and whose remote
//     address is not the pod's own: loopback, or an address some socket of
//     the namespace is bound to. Traffic inside the pod, such as a sidecar
//     proxy's to its app, is not a route's. Remote addresses are unmapped
//     (an IPv4-mapped IPv6 address counts as the IPv4 address).
//   - The first successful sample is the baseline: the connections open then
//     are remembered with their counters, not counted.
//   - After it, a connection whose cookie was not seen before is one arrival,
//     and a known connection whose received bytes grew is one arrival. The
//     arrival's time is the sample's time minus tcpi_last_data_recv, clamped
//     into the interval since the previous sample; a new connection without
//     data yet (or whose data the kernel does not tell) arrives at the
//     sample's time, the latest it can have.
//   - A source counts at most one arrival per sample, at the latest time
//     any of its connections received: several requests on one connection,
//     or on several connections of one load balancer node, between two
//     samples are one arrival. The summary says how often the Watcher
//     looked (api.Traffic.Every), and the server fits the share of looks
//     that found data, which a busy source cannot saturate.
//   - A peer's FIN takes one sequence number, which the kernel counts in
//     tcpi_bytes_received; a connection whose peer closed since the previous
//     sample must have grown by more than that one to count.
//   - Without tcpi_bytes_received (kernels before 4.1) growth is read from
//     tcpi_data_segs_in, else tcpi_segs_in (which also counts bare
//     acknowledgements, so it overcounts), else from tcpi_last_data_recv
//     moving forward.
//   - A connection in TIME_WAIT has no tcp_info (nor has one in FIN_WAIT2
//     that the app already closed, which the kernel keeps the same way): a
//     new one (a connection that opened and that the pod closed between two
//     samples) is an arrival at the sample's time; for a known one the last burst before
//     the close is not seen. Nor is it for a known connection that vanishes
//     between two samples. Both lose at most the last burst of a connection
//     that is closing anyway, while counting every close as an arrival would
//     make each load balancer's closing of its connections look like
//     traffic.
//
// # New connections
//
// Bytes on a connection already open are no new routing: an AWS NLB keeps
// passing a draining target the flows it had, and an HTTP/2 or gRPC stream
// stays open, while only a new connection says a load balancer node still
// sends the pod new flows. So per source the Watcher also counts, apart,
// the looks that saw a new inbound connection from it: a cookie not seen
// before (the kernel never reuses one), after the baseline, whatever its
// state (the TIME_WAIT and FIN_WAIT2 ones above included); never bytes on
// a known connection, nor a baseline connection. Such a look counts at the
// time of the source's arrival in it (its latest receipt, which may be on
// another connection), so the looks with new connections are a part of
// the source's arrivals, at the same times, and the server can fit them
// with the same functions. Unknown has no such series: the connections
// nobody saw open are new ones already, and a source left out of the
// summary, or past maxKeys, counts there whole; where the package cannot
// tell, an arrival is thus weighed as a new connection, never the other
// way. The Watcher also counts, per listed source, its inbound connections
// that were ESTABLISHED (open both ways) at the latest look: the flows a
// load balancer still keeps to the pod (api.SourceTraffic.Open).
//
// # Unknown arrivals
//
// A connection that opens and vanishes between two samples is never seen.
// The kernel still counts it in PassiveOpens: when the counter rose by more
// than the passive opens the sample saw (new sockets on a listening port,
// in-pod ones included, and the client ends of in-pod connections whose
// server end is gone), the difference counts as that many arrivals in
// Traffic.Unknown at the sample's time, the latest possible. Their port and
// source are unknown (mostly the node's probes and load balancer health
// checks, closed by the prober first), so the server never lets them alone
// hold a route past its tail. When the counter
// cannot be read, none are counted (PassiveOpensErr says why).
//
// # Summary and bounds
//
// Per remote address and local port the Watcher keeps the number of
// arrivals, the first one's time and the latest api.MaxTrafficAges times,
// and the same of its looks with new connections. Summary gives them as
// ages before the moment asked about, with the time watched since the
// baseline; the new connections (api.Traffic.NewConns) and the open ones
// only with the mean time between looks (api.Traffic.Every), beside which
// they travel, and then always (api.Traffic.ConnsCounted), so that a source
// without new connections is told from an agent that did not count them. It lists at most api.MaxTrafficSources
// sources, those with the most arrivals (ties: the most recent last
// arrival, then the lower address and port); the arrivals of the sources
// left out go to Unknown, and the server, seeing the summary at its bound,
// weighs Unknown as one more source: a quiet-looking summary never hides a
// recent arrival. Memory stays bounded: connections are forgotten once gone,
// and after maxKeys sources, a new source's arrivals go to Unknown.
//
// A failed read loses nothing by itself (cookies, byte counters and the
// passive-open counter carry over to the next good sample), so the watch
// goes on; but Summary returns nil while the latest good sample is older
// than a second, since no evidence is safer than evidence of quiet that was
// never observed. The baseline's failure, or 20 in a row, end the watch for
// good.
//
// It imports the standard library (syscall, not golang.org/x/sys) and
// draingate's api only, so the agent stays a small static binary.
package traffic
