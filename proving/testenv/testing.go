package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var shared *Cluster

// Main runs a package's tests against one cluster: call it from TestMain.
// It starts (or attaches to) the cluster, runs the tests, prints the tail of
// every component log when a test failed, and tears the cluster down, also
// on SIGINT/SIGTERM. With -short it starts nothing and cluster tests skip.
func Main(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var c *Cluster
	go func() {
		s := <-sig
		cancel()
		fmt.Fprintf(os.Stderr, "test cluster: %v: tearing down\n", s)
		if c != nil {
			c.Stop(context.Background())
		}
		os.Exit(1)
	}()
	c, err := Start(ctx, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = c
	code := m.Run()
	if code != 0 {
		c.DumpLogs(os.Stderr, 30)
	}
	if err := c.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Get returns the package's cluster, or skips the test when there is none
// (-short, or no TestMain calling Main).
func Get(t testing.TB) *Cluster {
	t.Helper()
	if shared == nil {
		t.Skip("needs the test cluster (run without -short, from a package whose TestMain calls testenv.Main)")
	}
	return shared
}

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace for one test and deletes it afterwards. When
// the test failed it first logs the namespace's pods and events.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = base[:40]
	}
	var b [3]byte
	rand.Read(b[:])
	name := base + "-" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	// Pods need the namespace's default ServiceAccount to be admitted.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s: default ServiceAccount never appeared", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.describeNamespace(t, name)
		}
		c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func (c *Cluster) describeNamespace(t testing.TB, ns string) {
	ctx := context.Background()
	if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s: phase=%s conditions=%v", p.Name, p.Status.Phase, p.Status.Conditions)
			for _, cs := range p.Status.ContainerStatuses {
				t.Logf("  container %s: ready=%v state=%+v", cs.Name, cs.Ready, cs.State)
			}
		}
	}
	if evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// DumpLogs writes the last lines of every component log.
func (c *Cluster) DumpLogs(w io.Writer, lines int) {
	files, _ := filepath.Glob(filepath.Join(c.paths.logs(), "*.log"))
	sort.Strings(files)
	for _, f := range files {
		fmt.Fprintf(w, "--- last lines of %s ---\n%s\n", f, tail(f, lines))
	}
}
