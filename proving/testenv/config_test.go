package testenv

import (
	"net/netip"
	"testing"
)

// The load balancer nodes' and clients' addresses must be told apart from every other
// source a pod sees: the node's own address, other pods, Service IPs.
func TestLBNodeIPsAreApartFromTheCluster(t *testing.T) {
	ips := LBNodeIPs()
	if len(ips) != 8 || ips[0] != "10.245.0.11" || ips[7] != "10.245.0.18" {
		t.Fatalf("LBNodeIPs() = %v; want 10.245.0.11 to 10.245.0.18", ips)
	}
	if c := LBClientIPs(); len(c) != 64 || c[0] != "10.245.1.1" || c[63] != "10.245.1.64" {
		t.Fatalf("LBClientIPs() = %v; want 10.245.1.1 to 10.245.1.64", c)
	}
	host := netip.MustParseAddr(HostIP)
	ranges := []netip.Prefix{netip.MustParsePrefix(ClusterCIDR), netip.MustParsePrefix(PodSubnet), netip.MustParsePrefix(ServiceCIDR)}
	seen := map[netip.Addr]bool{}
	for _, s := range bridgeExtraIPs() {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			t.Fatalf("%q is not an IPv4 address: %v", s, err)
		}
		if a == host || seen[a] {
			t.Errorf("%s: the node's address or a duplicate", a)
		}
		seen[a] = true
		for _, r := range ranges {
			if r.Contains(a) {
				t.Errorf("%s is inside the cluster's %s", a, r)
			}
		}
	}
	ips[0] = "changed by a caller"
	if again := LBNodeIPs(); again[0] != "10.245.0.11" {
		t.Errorf("LBNodeIPs()[0] = %q after a caller changed its copy; want each call to return a fresh slice", again[0])
	}
}
