package traffic

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParseRoute(t *testing.T) {
	// A pod on a bridge network: default via 10.244.0.1, and its subnet.
	const table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0100F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t0000F40A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n" +
		"eth1\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n"
	if got := parseRoute(table); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("10.244.0.1")}) {
		t.Errorf("parseRoute = %v, want [10.244.0.1]", got)
	}
	if got := parseRoute("garbage\nmore garbage\n"); len(got) != 0 {
		t.Errorf("parseRoute(garbage) = %v", got)
	}
}

func TestParseIPv6Route(t *testing.T) {
	const table = "" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000001 00000000 00000003 eth0\n" +
		"fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n"
	if got := parseIPv6Route(table); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("fd00::1")}) {
		t.Errorf("parseIPv6Route = %v, want [fd00::1]", got)
	}
}

// TestGatewaysOfThisHost: the real tables parse (whatever this host's
// default routes are, the addresses are specified ones).
func TestGatewaysOfThisHost(t *testing.T) {
	for _, g := range Gateways() {
		if !g.IsValid() || g.IsUnspecified() {
			t.Errorf("gateway %v", g)
		}
	}
	t.Logf("gateways here: %v", Gateways())
}
