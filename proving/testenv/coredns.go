package testenv

import (
	"context"
	"fmt"
	"net"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// corefile serves cluster names only: the network is closed, so there is no
// upstream to forward to (and no forwarding loop to detect).
const corefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
    loadbalance
}
`

// startCoreDNS runs CoreDNS as a Deployment behind the kube-dns Service at
// DNSIP, as kubeadm does, and waits until it answers from the host.
func (c *Cluster) startCoreDNS(ctx context.Context) error {
	const ns, name = "kube-system", "coredns"
	if err := c.createCoreDNS(ctx, ns, name); err != nil {
		return err
	}
	return c.waitReady(ctx, "coredns", 120*time.Second, func(ctx context.Context) error {
		return c.coreDNSAnswers(ctx, ns, name)
	})
}

// createCoreDNS creates CoreDNS's objects in ns: its ServiceAccount and the
// RBAC that lets it list and watch what it serves, the Corefile, the
// kube-dns Service at DNSIP and the Deployment. An object that already
// exists is kept as it is.
func (c *Cluster) createCoreDNS(ctx context.Context, ns, name string) error {
	labels := map[string]string{"k8s-app": "kube-dns"}
	objs := []func() error{
		func() error {
			_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
					{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Data:       map[string]string{"Corefile": corefile},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
				Spec: corev1.ServiceSpec{
					ClusterIP: DNSIP,
					Selector:  labels,
					Ports: []corev1.ServicePort{
						{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
						{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, corednsDeployment(ns, name, labels), metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// coreDNSAnswers checks CoreDNS once: its Deployment has a ready replica
// and, asked from the host through the kube-dns Service, it resolves the
// kubernetes Service to KubernetesServiceIP.
func (c *Cluster) coreDNSAnswers(ctx context.Context, ns, name string) error {
	d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if d.Status.ReadyReplicas < 1 {
		return fmt.Errorf("deployment %s/%s: %d ready replicas", ns, name, d.Status.ReadyReplicas)
	}
	addrs, err := c.Resolver().LookupHost(ctx, "kubernetes.default.svc.cluster.local")
	if err != nil {
		return err
	}
	if len(addrs) != 1 || addrs[0] != KubernetesServiceIP {
		return fmt.Errorf("kubernetes.default resolved to %v, want %s", addrs, KubernetesServiceIP)
	}
	return nil
}

// Resolver asks the cluster DNS (through the kube-dns Service, so through
// kube-proxy's rules) from the host.
func (c *Cluster) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(DNSIP, "53"))
	}}
}

func corednsDeployment(ns, name string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					DNSPolicy:          corev1.DNSDefault,
					PriorityClassName:  "system-cluster-critical",
					Containers: []corev1.Container{{
						Name:            "coredns",
						Image:           CoreDNSImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
							PeriodSeconds: 1,
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{
						Name: "config",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: name},
						}},
					}},
				},
			},
		},
	}
}
