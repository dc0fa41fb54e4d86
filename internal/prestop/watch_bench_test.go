//go:build linux

package prestop

import (
	"io"
	"math/rand/v2"
	"net"
	"runtime"
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

	h := newHistory(traffic.NewReader().Read, 4*time.Minute)
	now := time.Now()
	// A full window's looks first (2,400 at 100 ms, simulated clock), so
	// that the watches hold what they hold in a pod watched for minutes.
	for range 2400 {
		now = now.Add(100 * time.Millisecond)
		if err := h.sample(now); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap := float64(ms.HeapInuse) / (1 << 20)
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		if err := h.sample(now); err != nil {
			b.Fatal(err)
		}
	}
	perLook := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perLook*10/1e6, "millicores@10looks/s")
	b.ReportMetric(heap, "heap-MiB")
	if s := h.summary(now); s != nil {
		b.ReportMetric(float64(len(s.Sources)), "sources")
	}
}
