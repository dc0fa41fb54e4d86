package release

import (
	"context"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// runVersionOnCluster imports img's linux/amd64 image into the project's
// cluster and runs `<name> version` in it as a pod under Pod Security
// restricted's rules (non-root from the image's own user), returning what
// it printed.
func runVersionOnCluster(t *testing.T, ctx context.Context, img Image) string {
	t.Helper()
	c := testenv.Get(t)
	ns := c.Namespace(t)
	im, err := img.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var amd64 v1.Image
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Architecture == "amd64" {
			if amd64, err = img.Index.Image(d.Digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	if amd64 == nil {
		t.Fatalf("%s: no linux/amd64 image", img.Name)
	}
	ref := "draingate.local/release-" + img.Name + ":" + img.Digest.Hex[:12]
	if err := c.ImportImage(ctx, ref, amd64); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: img.Name + "-version"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "version", Image: ref, ImagePullPolicy: corev1.PullNever, Args: []string{"version"},
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, img.Name+" version pod done", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return true, nil
		case corev1.PodFailed:
			t.Fatalf("%s version pod failed: %+v", img.Name, p.Status.ContainerStatuses)
		}
		return false, nil
	})
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(logs))
}
