//go:build linux

package prestop

import (
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"draingate.dev/draingate/internal/traffic"
)

// BenchmarkWatcherAt1000Connections: what the watcher costs a pod holding
// 1,000 keep-alive connections from 100 sources (10 each, as load balancer
// nodes and clients hold them), 1,000 requests a second spread over them:
// per look (one every 100 ms in the pod) the CPU it takes, as millicores
// at ten looks a second, and the heap its two watches hold after a full
// window's looks. The figures for docs/injection.md ("what the watcher
// costs").
func BenchmarkWatcherAt1000Connections(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for src := range 100 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(src+1))}}
		for range 10 {
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Skipf("dial from 127.0.1.%d: %v", src+1, err)
			}
			conns = append(conns, c)
		}
	}
	// 1,000 requests a second, each on a connection at random.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		req := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		for t := time.NewTicker(time.Millisecond); !stop.Load(); <-t.C {
			conns[rng.IntN(len(conns))].Write(req)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	benchLooks(b, newHistory(traffic.NewReader().Read, 4*time.Minute))
}

// BenchmarkWatcherCountsAt1000Connections: what counting costs the watcher,
// apart from the kernel's read (BenchmarkWatcherAt1000Connections reads
// real sockets, but from loopback peers, which the watcher takes for the
// pod itself and never counts): 1,000 established connections from 100
// load balancer addresses, 100 of them (a tenth) receiving a request at
// each look (1,000 requests a second at ten looks a second), read from a
// snapshot made in memory. Per look the CPU the two watches take, as
// millicores at ten looks a second, and their heap after a full window.
func BenchmarkWatcherCountsAt1000Connections(b *testing.B) {
	local := netip.MustParseAddrPort("10.244.0.7:8080")
	conns := make([]traffic.Conn, 1000)
	for i := range conns {
		conns[i] = traffic.Conn{Cookie: uint64(i + 1), State: traffic.Established, Local: local,
			Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i / 10 / 250), byte(i/10%250 + 1)}), uint16(20000+i)),
			Info:   traffic.Info{HasBytesReceived: true, HasDataSegsIn: true, HasSegsIn: true, HasLastDataRecv: true}}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	read := func() (traffic.Snapshot, error) {
		for range 100 {
			c := &conns[rng.IntN(len(conns))]
			c.Info.BytesReceived += 320
			c.Info.DataSegsIn++
			c.Info.SegsIn += 2
		}
		for i := range conns {
			conns[i].Info.LastDataRecv = 50 * time.Millisecond
		}
		return traffic.Snapshot{Listening: []uint16{8080}, Conns: slices.Clone(conns), PassiveOpens: 1000}, nil
	}
	benchLooks(b, newHistory(read, DefaultHistory))
}

// benchLooks takes a full window's looks at h first (2,400 at 100 ms,
// simulated clock), so that the watches hold what they hold in a pod
// watched for minutes, then times its looks: per look the CPU, as
// millicores at ten looks a second, the heap after the window, and the
// sources the summary counted.
func benchLooks(b *testing.B, h *history) {
	now := time.Now()
	look := func() {
		now = now.Add(100 * time.Millisecond)
		if err := h.sample(now); err != nil {
			b.Fatal(err)
		}
	}
	for range 2400 {
		look()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap := float64(ms.HeapInuse) / (1 << 20)
	b.ResetTimer()
	for b.Loop() {
		look()
	}
	perLook := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perLook*10/1e6, "millicores@10looks/s")
	b.ReportMetric(heap, "heap-MiB")
	if s := h.summary(now); s != nil {
		b.ReportMetric(float64(len(s.Sources)), "sources")
	}
}
