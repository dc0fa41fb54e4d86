package elbv2

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkTargetHealthCalls measures the DescribeTargetHealth calls per
// second that one target group costs with 1 to 1000 waiters, as the
// emulator counts them. Each iteration is one Interval of polling while
// every waiter reads Latest on each change. The Interval (100 ms) and the
// budget (20/s, burst 5) are far shorter and bigger than the defaults (2 s,
// 2/s) only so that the benchmark runs fast: the figure to read is that
// calls/s stays at 1/Interval (10/s) whatever the number of waiters, and
// never above the budget.
func BenchmarkTargetHealthCalls(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			bn := newBench(b)
			arn := bn.group(b, "bench", time.Minute)
			for range 3 {
				if err := bn.sim.RegisterTargets(arn, healthyTarget(b)); err != nil {
					b.Fatal(err)
				}
			}
			cfg := Config{Rate: 20, Burst: 5, Interval: 100 * time.Millisecond}
			p := New(bn.client, cfg)
			defer p.Close()

			var reads sync.WaitGroup
			var mu sync.Mutex
			read := 0
			ws := make([]*Waiter, n)
			for i := range ws {
				ws[i] = p.Watch(arn)
				reads.Add(1)
				go func(w *Waiter) {
					defer reads.Done()
					k := 0
					for range w.Changed() {
						if _, ok := w.Latest(); ok {
							k++
						}
					}
					mu.Lock()
					read += k
					mu.Unlock()
				}(ws[i])
			}
			waitFor(b, "a first listing", func() bool { _, ok := ws[0].Latest(); return ok })

			_, _, before := bn.describeCalls()
			start := time.Now()
			b.ResetTimer()
			for range b.N {
				time.Sleep(cfg.Interval)
			}
			elapsed := time.Since(start)
			_, _, after := bn.describeCalls()
			b.StopTimer()
			for _, w := range ws {
				w.Close()
			}
			reads.Wait()

			calls := after - before
			b.ReportMetric(float64(calls)/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(read)/elapsed.Seconds(), "reads/s")
			if budget := float64(cfg.Burst) + cfg.Rate*elapsed.Seconds() + 1; float64(calls) > budget {
				b.Errorf("%d calls in %v, over the budget of %.1f", calls, elapsed, budget)
			}
		})
	}
}
