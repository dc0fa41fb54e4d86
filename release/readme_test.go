package release

import (
	"bufio"
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/testenv"
)

// readmeCommands are the shell commands of the README's sh blocks from
// its install section through its verify section, a command's continued
// lines joined.
func readmeCommands(t *testing.T, readme string) []string {
	t.Helper()
	start, end := strings.Index(readme, "\n## Install on EKS"), strings.Index(readme, "\n## Knobs")
	if start < 0 || end < start {
		t.Fatal("README.md has no \"## Install on EKS\" ... \"## Knobs\" sections: update this test")
	}
	var cmds []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme[start:end], -1) {
		var cur strings.Builder
		sc := bufio.NewScanner(strings.NewReader(m[1]))
		for sc.Scan() {
			line := sc.Text()
			if c, ok := strings.CutSuffix(strings.TrimRight(line, " "), `\`); ok {
				cur.WriteString(c + " ")
				continue
			}
			cur.WriteString(line)
			if s := strings.TrimSpace(cur.String()); s != "" {
				cmds = append(cmds, s)
			}
			cur.Reset()
		}
	}
	return cmds
}

// copyCheckout copies the module's files (tracked, and new ones git does
// not ignore) to dir: a clean clone of the working tree, so that the
// README's make commands write their out/ there and not in this checkout.
func copyCheckout(t *testing.T, root, dir string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestREADMEInstall runs the README's install and verify commands on the
// test cluster as written: make images and make chart push to a registry
// (an HTTPS one this test serves, in place of registry.example.com and of
// the release's ghcr.io/draingate), helm installs the chart from it, the namespace shop is opted in and rolled
// out, and a pod deleted there is held by the gate and released, as the
// Events and kubectl draingate say. Only the AWS account's steps (aws iam,
// eksctl) cannot run here; a command of any other kind fails the test
// until it is taught.
func TestREADMEInstall(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t, string(readme))

	// The registry, trusted by make, helm (Go programs: SSL_CERT_FILE)
	// and the cluster's containerd.
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.StartTLS()
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	tmp := t.TempDir()
	caFile := filepath.Join(tmp, "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.TrustRegistry(host, caPEM); err != nil {
		t.Fatal(err)
	}
	// The tools the README names: helm and the plugin built here, kubectl
	// the cluster's.
	helm, err := c.GoBinary(ctx, "helm.sh/helm/v4/cmd/helm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GoBinary(ctx, "./cmd/kubectl-draingate"); err != nil {
		t.Fatal(err)
	}
	checkout := filepath.Join(tmp, "draingate")
	copyCheckout(t, root, checkout)
	env := append(os.Environ(), "PATH="+filepath.Dir(helm)+":"+c.BinDir+":"+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig, "SSL_CERT_FILE="+caFile,
		"HELM_CONFIG_HOME="+filepath.Join(tmp, "helm-config"), "HELM_CACHE_HOME="+filepath.Join(tmp, "helm-cache"), "HELM_DATA_HOME="+filepath.Join(tmp, "helm-data"))
	run := func(cmd string) string {
		t.Helper()
		t.Logf("$ %s", cmd)
		sh := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmd)
		sh.Dir, sh.Env = checkout, env
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		for _, cmd := range []string{"helm uninstall draingate -n draingate-system --wait", "kubectl delete namespace shop draingate-system --wait=false"} {
			sh := exec.Command("bash", "-c", cmd)
			sh.Env = env
			if out, err := sh.CombinedOutput(); err != nil {
				t.Logf("cleanup: %s: %v: %s", cmd, err, out)
			}
		}
	})

	// A workload in shop before draingate is installed: two replicas
	// behind a Service (the one left keeps the Service's route closable).
	if err := c.LoadGoImage(ctx, testenv.TestAppImage, "./proving/testenv/cmd/testapp"); err != nil {
		t.Fatal(err)
	}
	shop(ctx, t, c)

	var skipped []string
	var pod string
	for _, cmd := range cmds {
		// The test's registry stands for both the release's (ghcr.io/draingate)
		// and yours (registry.example.com/platform): step 1 pushed there.
		cmd = strings.NewReplacer("registry.example.com/platform", host+"/platform", "ghcr.io/draingate", host+"/platform").Replace(cmd)
		switch strings.Fields(cmd)[0] {
		case "aws", "eksctl":
			skipped = append(skipped, cmd)
			continue
		case "make", "helm":
			run(cmd)
		case "kubectl":
			if strings.Contains(cmd, "rollout restart") {
				run(cmd)
				pod = rolledOut(ctx, t, c)
				continue
			}
			if pod == "" && regexp.MustCompile(`\bPOD\b`).MatchString(cmd) {
				t.Fatalf("%q names a pod before the README rolled one out", cmd)
			}
			cmd = regexp.MustCompile(`\bPOD\b`).ReplaceAllString(cmd, pod)
			verify(ctx, t, cmd, run)
		default:
			t.Fatalf("the README's install runs %q, which this test does not know how to run: teach it", cmd)
		}
	}
	if pod == "" {
		t.Fatal("the README's install rolled out no workload (no kubectl rollout restart)")
	}
	t.Logf("not run here (the AWS account's side): %q", skipped)
}

// verify runs one of the README's verify commands and checks what it
// prints: the agent in the preStop hook, the gate's Events.
func verify(ctx context.Context, t *testing.T, cmd string, run func(string) string) {
	t.Helper()
	switch {
	case strings.Contains(cmd, "preStop"):
		if out := run(cmd); !strings.Contains(out, "draingate-prestop") {
			t.Errorf("%s printed %q: no draingate-prestop in the preStop hook", cmd, out)
		}
	case strings.Contains(cmd, "get events"):
		// The Events are written asynchronously: the release may land
		// a moment after the pod is gone.
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for {
			out := run(cmd)
			if strings.Contains(out, "DrainWaitStarted") && strings.Contains(out, "DrainReleased") {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s printed no DrainWaitStarted and DrainReleased within a minute of the pod's deletion:\n%s", cmd, out)
			case <-time.After(time.Second):
			}
		}
	default:
		run(cmd)
	}
}

// shop creates namespace shop with Deployment web (two replicas of the
// test app, a named port) and its Service.
func shop(ctx context.Context, t *testing.T, c *testenv.Cluster) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
				}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments("shop").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	if _, err := c.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rolledOut waits until Deployment web's rollout is done and returns one
// of its new pods, which must carry the agent.
func rolledOut(ctx context.Context, t *testing.T, c *testenv.Cluster) string {
	t.Helper()
	for {
		d, err := c.Client.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
		if err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 && d.Status.Replicas == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("deployment shop/web not rolled out: %+v (%v)", d.Status, err)
		case <-time.After(time.Second):
		}
	}
	pods, err := c.Client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Annotations["draingate.dev/injected"] != "" {
			return p.Name
		}
	}
	t.Fatalf("no pod of shop/web carries the agent after the rollout: %d pods", len(pods.Items))
	return ""
}
