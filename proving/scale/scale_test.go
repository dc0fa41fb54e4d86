package scale

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestRunReleasesEachPodAfterItsRouteChange is one small cell on the real
// cluster: every waiting pod's agent is released, none before its routes
// changed, the wait API answered the samples, the server stayed within its
// AWS budget, and nothing the run created is left.
func TestRunReleasesEachPodAfterItsRouteChange(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := c.GoBinary(ctx, "./cmd/draingate")
	if err != nil {
		t.Fatal(err)
	}
	var progress testutil.SyncBuffer
	res, err := Run(ctx, Env{Config: c.Config, Kubeconfig: c.Kubeconfig, Server: bin, Dir: t.TempDir(), Progress: &progress},
		Config{Pods: 300, Waiters: 30, Services: 30, Steady: 3 * time.Second, ReleaseTimeout: 2 * time.Minute, Seed: 3})
	t.Log(progress.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Released != 30 || res.Early != 0 || res.Unreleased != 0 {
		t.Errorf("released %d, early %d, still waiting %d: want all 30 released after their route change", res.Released, res.Early, res.Unreleased)
	}
	if res.Answers == 0 || res.AnswerP99 <= 0 {
		t.Errorf("no answer latency measured: %+v", res)
	}
	if res.RSS == 0 || res.PeakRSS < res.RSS || res.HeapInuse == 0 || res.StackInuse == 0 {
		t.Errorf("memory not read: RSS %d, peak %d, heap %d, stacks %d", res.RSS, res.PeakRSS, res.HeapInuse, res.StackInuse)
	}
	if b, err := os.ReadFile(res.HeapProfile); err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("heap profile %s not saved as gzip: %v", res.HeapProfile, err)
	}
	if res.TargetGroups != 6 || res.Namespaces != 3 {
		t.Errorf("%d target groups in %d namespaces, want 6 in 3", res.TargetGroups, res.Namespaces)
	}
	// The server's token bucket (--aws-rate 2/s, --aws-burst 5) bounds
	// its calls over any window, however slow the machine.
	if calls := res.DescribePerSecond * res.Window.Seconds(); calls > 5+2*res.Window.Seconds()+0.5 {
		t.Errorf("%.0f DescribeTargetHealth calls in %s: over the server's budget", calls, res.Window)
	}
	if res.DescribePerSecond == 0 {
		t.Error("no DescribeTargetHealth call while 30 pods waited")
	}
	if _, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node %s left behind (%v)", nodeName, err)
	}
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, "scale-") && ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s left behind", ns.Name)
		}
	}
}

var (
	benchPods    = flag.Int("scale.pods", 1000, "BenchmarkScale: pods")
	benchWaiters = flag.Int("scale.waiters", 100, "BenchmarkScale: waiting agents")
)

// BenchmarkScale runs one cell (-scale.pods, -scale.waiters) per
// iteration and reports its figures; `draingate-lab scale` runs the table.
func BenchmarkScale(b *testing.B) {
	c := testenv.Get(b)
	ctx := context.Background()
	bin, err := c.GoBinary(ctx, "./cmd/draingate")
	if err != nil {
		b.Fatal(err)
	}
	var res Result
	for b.Loop() {
		res, err = Run(ctx, Env{Config: c.Config, Kubeconfig: c.Kubeconfig, Server: bin, Dir: b.TempDir(), Progress: os.Stderr},
			Config{Pods: *benchPods, Waiters: *benchWaiters, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(res.RSS)/mib, "rss-MiB")
	b.ReportMetric(float64(res.HeapInuse)/mib, "heap-MiB")
	b.ReportMetric(res.CPU, "cpu-cores")
	b.ReportMetric(float64(res.AnswerP50)/1e6, "answer-p50-ms")
	b.ReportMetric(float64(res.AnswerP99)/1e6, "answer-p99-ms")
	b.ReportMetric(res.ReleaseP50.Seconds(), "release-p50-s")
	b.ReportMetric(res.ReleaseP99.Seconds(), "release-p99-s")
	b.ReportMetric(res.DescribePerSecond, "describe/s")
}

func TestSlopes(t *testing.T) {
	rs := []Result{
		{Pods: 1000, Waiters: 100, RSS: 50 * mib, HeapInuse: 20 * mib},
		{Pods: 5000, Waiters: 100, RSS: 50*mib + 4000*1000, HeapInuse: 20*mib + 4000*500},
		{Pods: 10000, Waiters: 100, RSS: 50*mib + 9000*1000, HeapInuse: 20*mib + 9000*500},
		{Pods: 1000, Waiters: 1000, RSS: 60 * mib},
	}
	s := Slopes(rs)
	if len(s) != 1 || s[0].Waiters != 100 || s[0].Points != 3 {
		t.Fatalf("slopes %+v: want one, for 100 waiters over 3 sizes (1000 waiters has one size)", s)
	}
	if d := s[0].RSS - 1000; d > 1e-6 || d < -1e-6 {
		t.Errorf("RSS slope %v, want 1000 bytes per pod", s[0].RSS)
	}
	if d := s[0].Heap - 500; d > 1e-6 || d < -1e-6 {
		t.Errorf("heap slope %v, want 500 bytes per pod", s[0].Heap)
	}
}

func TestReportFiles(t *testing.T) {
	rs := []Result{
		{Pods: 1000, Waiters: 100, Services: 200, TargetGroups: 40, RSS: 50 * mib, PeakRSS: 60 * mib, HeapInuse: 20 * mib,
			AnswerP50: 1500 * time.Microsecond, AnswerP99: 9 * time.Millisecond, Released: 100, ReleaseP50: 3 * time.Second, DescribeBudget: 2},
		{Pods: 5000, Waiters: 100, RSS: 80 * mib, HeapInuse: 40 * mib},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1000 | 100 | 200 / 40 | 50.0 | 60.0 | 20.0 | 0.0 |", "| 1.5 / 9.0 |", "100 waiters: RSS grows"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	png := filepath.Join(t.TempDir(), "memory.png")
	if err := WritePNG(png, rs); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("memory.png is not a PNG (%v)", err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(png), ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestPodAddr(t *testing.T) {
	for i, want := range map[int]string{0: "100.64.0.0", 1: "100.64.0.1", 300: "100.64.1.44", 70000: "100.65.17.112"} {
		if got := podAddr(i); got != want {
			t.Errorf("podAddr(%d) = %s, want %s", i, got, want)
		}
	}
}
