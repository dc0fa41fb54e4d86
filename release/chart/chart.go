// Package chart installs draingate's embedded Helm chart (deploy/helm) with
// the Helm Go library: no helm binary, no chart repository.
package chart

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/deploy/helm"
)

// Load reads the embedded chart.
func Load() (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(helm.FS, "draingate", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(helm.FS, p)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: strings.TrimPrefix(p, "draingate/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the embedded chart: %w", err)
	}
	return loader.LoadFiles(files)
}

// Release is an installed release of the chart.
type Release struct {
	Name, Namespace string
	cfg             *action.Configuration
}

// Install installs the chart as release name in namespace (created if
// missing) with values, and waits until its workloads are ready or timeout
// passes. On failure it uninstalls what it installed.
func Install(ctx context.Context, kubeconfig, namespace, name string, values map[string]any, timeout time.Duration, log *slog.Logger) (*Release, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	cfg, err := configuration(kubeconfig, namespace, log)
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.Namespace, in.ReleaseName = namespace, name
	in.CreateNamespace = true
	in.WaitStrategy = kube.StatusWatcherStrategy
	in.Timeout = timeout
	in.RollbackOnFailure = true // uninstall on failure: nothing half-installed stays
	if _, err := in.RunWithContext(ctx, ch, values); err != nil {
		return nil, fmt.Errorf("helm install %s into %s: %w", name, namespace, err)
	}
	return &Release{Name: name, Namespace: namespace, cfg: cfg}, nil
}

// Uninstall removes the release and waits for its objects to go.
func (r *Release) Uninstall(timeout time.Duration) error {
	un := action.NewUninstall(r.cfg)
	un.IgnoreNotFound = true
	un.WaitStrategy = kube.StatusWatcherStrategy
	un.Timeout = timeout
	if _, err := un.Run(r.Name); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", r.Name, err)
	}
	return nil
}

func configuration(kubeconfig, namespace string, log *slog.Logger) (*action.Configuration, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(log.Handler()))
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// Render renders the embedded chart as helm install would, offline: release
// name in namespace, values over the chart's values.yaml, and kubeVersion
// (e.g. "v1.37.2"; empty for Helm's default) as the cluster's version in
// .Capabilities. It returns the rendered files by name, e.g.
// "draingate/templates/deployment.yaml", partials and NOTES.txt included.
// Strict: a template reading a value values.yaml lacks fails.
func Render(namespace, name string, values map[string]any, kubeVersion string) (map[string]string, error) {
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	return RenderChart(ch, namespace, name, values, kubeVersion)
}

// RenderChart renders ch (the embedded chart or a packaged one) as Render
// does.
func RenderChart(ch *chartv2.Chart, namespace, name string, values map[string]any, kubeVersion string) (map[string]string, error) {
	caps := common.DefaultCapabilities.Copy()
	if kubeVersion != "" {
		kv, err := common.ParseKubeVersion(kubeVersion)
		if err != nil {
			return nil, err
		}
		caps.KubeVersion = *kv
	}
	top, err := util.ToRenderValues(ch, values, common.ReleaseOptions{Name: name, Namespace: namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, top)
}

// WaitInjecting waits until pods created in ns (a namespace labelled for
// injection) come out of admission with the agent, proven by server-side
// dry-run creates of a probe pod. A ready gate server is not enough: until
// kube-proxy has programmed the webhook Service's endpoint, the API server
// cannot reach it and admits pods unchanged (failurePolicy Ignore).
func WaitInjecting(ctx context.Context, cl kubernetes.Interface, ns string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "draingate-probe-"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "probe", Image: "draingate.local/probe:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	var last error
	for {
		p, err := cl.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err != nil:
			last = err
		case p.Annotations[api.AnnotationInjected] != "":
			return nil
		default:
			last = fmt.Errorf("a dry-run pod in %s came back without the agent", ns)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("draingate's webhook does not inject pods in %s yet: %v", ns, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
