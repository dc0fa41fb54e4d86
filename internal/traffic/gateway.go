package traffic

import (
	"encoding/hex"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Gateways returns the namespace's default gateways, from /proc/net/route
// and /proc/net/ipv6_route (the reading process's network namespace). On
// bridge networks the gateway is the node's side of the pod's link, where
// kubelet probes come from: the server counts it as the node's address.
// A table that cannot be read gives no gateways, not an error: the server
// then knows the node by its host addresses alone.
func Gateways() []netip.Addr {
	var out []netip.Addr
	if b, err := os.ReadFile("/proc/net/route"); err == nil {
		out = append(out, parseRoute(string(b))...)
	}
	if b, err := os.ReadFile("/proc/net/ipv6_route"); err == nil {
		out = append(out, parseIPv6Route(string(b))...)
	}
	return out
}

// parseRoute reads /proc/net/route: a header line, then per route
// "Iface Destination Gateway Flags RefCnt Use Metric Mask ...", addresses
// as 8 hex digits in host (little-endian) byte order. A default route has
// destination and mask 0 and the RTF_GATEWAY flag (0x2).
func parseRoute(s string) []netip.Addr {
	var out []netip.Addr
	for i, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		flags, err := hex.DecodeString(pad(f[3], 4))
		if err != nil || flags[len(flags)-1]&0x2 == 0 {
			continue
		}
		g, err := hex.DecodeString(f[2])
		if err != nil || len(g) != 4 {
			continue
		}
		a := netip.AddrFrom4([4]byte{g[3], g[2], g[1], g[0]})
		if !a.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// parseIPv6Route reads /proc/net/ipv6_route: per route "dest destlen src
// srclen nexthop metric refcnt use flags iface", addresses as 32 hex digits
// in network order. A default route has destination ::/0 and a next hop.
func parseIPv6Route(s string) []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[1] != "00" || strings.Trim(f[0], "0") != "" {
			continue
		}
		g, err := hex.DecodeString(f[4])
		if err != nil || len(g) != 16 {
			continue
		}
		a := netip.AddrFrom16([16]byte(g)).Unmap()
		if !a.IsUnspecified() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func pad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}
