package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/proving/lab/client"
)

const (
	inClusterName = "incluster-client"
	inClusterPort = 9090
)

// inCluster is the in-cluster client of one strategy (--incluster-rps): a
// pod calling the app's Service by its ClusterIP, through kube-proxy, as
// another service of the cluster would.
type inCluster struct {
	ns, ip string
}

// startInCluster starts the client pod in ns at the load's in-cluster
// rate and waits until it runs.
func (r *runner) startInCluster(ctx context.Context, ns string) (*inCluster, error) {
	cl := r.env.Client
	svc, err := cl.CoreV1().Services(ns).Get(ctx, appName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	rate := float64(r.o.Load.InClusterRPS) * float64(time.Second) / float64(r.o.loadPer())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: inClusterName, Labels: map[string]string{"app": inClusterName, api.LabelInject: api.Disabled}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "client", Image: DemoImage, ImagePullPolicy: corev1.PullNever,
				Args:  []string{"client", "-url", fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port), "-rate", strconv.FormatFloat(rate, 'g', -1, 64), "-listen", fmt.Sprintf(":%d", inClusterPort)},
				Ports: []corev1.ContainerPort{{Name: "counts", ContainerPort: inClusterPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/counts", Port: intstr.FromString("counts")}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if _, err := cl.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("in-cluster client: %w", err)
	}
	c := &inCluster{ns: ns}
	err = waitFor(ctx, 2*time.Minute, func() bool {
		p, err := cl.CoreV1().Pods(ns).Get(ctx, inClusterName, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				c.ip = p.Status.PodIP
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("in-cluster client pod %s/%s not ready: %w", ns, inClusterName, err)
	}
	return c, nil
}

// counts reads the client's counts so far.
func (c *inCluster) counts(ctx context.Context) (client.Counts, error) {
	var out client.Counts
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/counts", c.ip, inClusterPort), nil)
	if err != nil {
		return out, err
	}
	resp, err := noProxy.Do(req)
	if err != nil {
		return out, fmt.Errorf("in-cluster client's counts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("in-cluster client's counts: %s", resp.Status)
	}
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// noProxy reaches pod addresses directly, whatever HTTP_PROXY says.
var noProxy = &http.Client{Transport: &http.Transport{}}
