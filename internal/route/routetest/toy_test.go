package routetest_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/route/routetest"
	"draingate.dev/draingate/internal/server"
	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestToyKindHoldsAPod: a kind of route from a folder of its own, given to
// the server beside its own kinds, with no edit to the server: a
// terminating pod that no Service lists is held while a toy route lists it
// as in, and released once the route took it out and its tail passed.
// Without the toy kind the gate would release it at once (no routes).
func TestToyKindHoldsAPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := testenv.Get(t)
	ns := c.Namespace(t)
	if err := c.LoadGoImage(ctx, testenv.TestAppImage, "./proving/testenv/cmd/testapp"); err != nil {
		t.Fatal(err)
	}
	route := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "toy", Labels: map[string]string{routetest.Label: "true"}},
		Data: map[string]string{"web": "in"}}
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A native sleep hook holds the pod terminating; the test deletes it
	// with no grace at the end.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](600),
			Containers: []corev1.Container{{Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 590}}}}},
		},
	}
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Client.CoreV1().Pods(ns).Delete(context.Background(), "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	testutil.Eventually(t, ctx, "the pod running", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})

	url := serve(t, ctx, c)
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "toy " + ns + "/toy"
	var v api.Verdict
	testutil.Eventually(t, ctx, "the toy route in the verdict", func() (bool, error) {
		v = ask(t, ctx, url, ns, string(pod.UID))
		return routes(v)[name].State == "in", nil
	})
	if v.Released {
		t.Fatalf("released while the toy route lists the pod: %s", v.Message)
	}
	route.Data["web"] = "out"
	if _, err := c.Client.CoreV1().ConfigMaps(ns).Update(ctx, route, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, "released once the toy route took the pod out", func() (bool, error) {
		v = ask(t, ctx, url, ns, string(pod.UID))
		return v.Released, nil
	})
	if r := routes(v)[name]; v.Reason != api.ReasonDrained || r.ClosedBy != api.ClosedByTail {
		t.Errorf("released %s, toy route %+v; want drained, the toy route closed by its tail: %s", v.Reason, r, v.Message)
	}
}

// serve runs a server with its own kinds (target groups off: no AWS here)
// and the toy kind, configured from the command line's flags.
func serve(t *testing.T, ctx context.Context, c *testenv.Cluster) string {
	kinds := append(server.Kinds(), routetest.NewKind())
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, k := range kinds {
		k.Flags(fs)
	}
	if err := fs.Parse([]string{"--target-groups=false", "--tail-endpointslice=1s", "--tail-toy=1s"}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	s, err := server.New(server.Options{Kube: c.Config, Routes: kinds, Listener: ln, WaitAPISources: server.SourcesAny,
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v; log:\n%s", err, logs.String())
		}
	})
	url := "http://" + ln.Addr().String()
	testutil.Eventually(t, ctx, "server ready", func() (bool, error) {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return url
}

// ask asks the wait API about pod web at once; anything but a 200 fails
// the test.
func ask(t *testing.T, ctx context.Context, url, ns, uid string) api.Verdict {
	t.Helper()
	req := api.DrainRequest{Namespace: ns, Pod: "web", UID: uid}
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, req.URL(url), nil)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v api.Verdict
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("wait API answered %d: %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// routes indexes a verdict's routes by "kind name".
func routes(v api.Verdict) map[string]api.Route {
	m := map[string]api.Route{}
	for _, r := range v.Routes {
		m[r.Kind+" "+r.Name] = r
	}
	return m
}
