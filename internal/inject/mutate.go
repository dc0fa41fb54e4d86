package inject

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Wanted says whether pod should be injected: the pod's label
// draingate.dev/inject=enabled, or its namespace's (nsLabels), opts it in;
// the pod's draingate.dev/inject=disabled opts it out; pods in
// s.ServerNamespace never are. The webhook's selectors make the same choice
// before the API server calls it; the handler checks again so a broader
// webhook configuration cannot inject more than this says.
//
// pod.Namespace must be set (at admission the handler takes it from the
// request: a pod's own metadata may leave it empty).
func Wanted(pod *corev1.Pod, nsLabels map[string]string, s Settings) bool {
	if pod == nil {
		return false
	}
	v := pod.Labels[LabelInject]
	if v == Disabled || (s.ServerNamespace != "" && pod.Namespace == s.ServerNamespace) {
		return false
	}
	return v == Enabled || nsLabels[LabelInject] == Enabled
}

// Mutate returns pod with draingate's agent injected, and warnings for the
// user. It does no I/O and never changes pod: when it injects, out is a
// copy; when it does not, out is pod itself, and the warnings say why where
// the user has something to fix. Opted-out pods, already injected pods and
// pods in s.ServerNamespace come back as they are, without a warning.
//
// err is only for what no pod could fix: bad Settings or a nil pod.
func Mutate(pod *corev1.Pod, s Settings) (out *corev1.Pod, warnings []string, err error) {
	if pod == nil {
		return nil, nil, errors.New("inject: nil pod")
	}
	s, err = s.withDefaults()
	if err != nil {
		return pod, nil, err
	}
	if !applies(pod, s) {
		return pod, nil, nil
	}
	p, warnings := planPod(pod, s)
	if p == nil {
		return pod, warnings, nil
	}
	out = pod.DeepCopy()
	p.apply(out, s)
	return out, warnings, nil
}

// applies rules out pods Mutate leaves alone without a word: the user (or
// an earlier Mutate) already decided.
func applies(pod *corev1.Pod, s Settings) bool {
	if pod.Labels[LabelInject] == Disabled {
		return false
	}
	if _, done := pod.Annotations[AnnotationInjected]; done {
		return false
	}
	return s.ServerNamespace == "" || pod.Namespace != s.ServerNamespace
}

// plan is everything decided about one pod before any of it is changed, so
// that a problem found late cannot leave a pod half injected.
type plan struct {
	t     timings
	gated []gatedContainer
	// grace is the new terminationGracePeriodSeconds, or nil to keep it.
	grace *int64
	// log sends the agent's lines to the app's stdout (see agentLogPath).
	log bool
}

type gatedContainer struct {
	index int
	hook  original
}

// planPod decides how to inject pod, or returns nil and the reasons it
// cannot be. All problems are reported at once, so one round of fixes does.
func planPod(pod *corev1.Pod, s Settings) (*plan, []string) {
	t, problems := podTimings(pod, s)
	idx, ps := gatedIndexes(pod)
	problems = append(problems, ps...)
	problems = append(problems, podConflicts(pod, s)...)
	p := &plan{t: t, log: !ptr.Deref(pod.Spec.ShareProcessNamespace, false)}
	var notes []string
	for _, i := range idx {
		c := &pod.Spec.Containers[i]
		hook, problem := translateHook(c)
		if problem != "" {
			problems = append(problems, problem)
		}
		if hook.warning != "" {
			notes = append(notes, warnPrefix+hook.warning)
		}
		problems = append(problems, containerConflicts(c, s)...)
		p.gated = append(p.gated, gatedContainer{index: i, hook: hook})
	}
	if len(problems) > 0 {
		for i, pr := range problems {
			problems[i] = notInjectedPrefix + pr
		}
		return nil, problems
	}
	if len(idx) == 0 {
		return nil, []string{notInjectedPrefix + "no container declares ports, so none takes traffic to gate; name the containers to gate in annotation " + AnnotationContainers}
	}
	p.grace = graceFor(pod.Spec.TerminationGracePeriodSeconds, t, p.gated)
	if w := dnsWarning(pod, s.Server); w != "" {
		notes = append(notes, warnPrefix+w)
	}
	return p, notes
}

// gatedIndexes picks the containers to gate: those named in
// draingate.dev/containers, else those with ports, in pod order.
func gatedIndexes(pod *corev1.Pod) ([]int, []string) {
	v, named := pod.Annotations[AnnotationContainers]
	if !named {
		var idx []int
		for i, c := range pod.Spec.Containers {
			if len(c.Ports) > 0 {
				idx = append(idx, i)
			}
		}
		return idx, nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, []string{fmt.Sprintf("annotation %s=%s names no container: want a comma-separated list of this pod's containers (%s)",
			AnnotationContainers, quote(v), containerNames(pod.Spec.Containers))}
	}
	var idx []int
	var problems []string
	for _, n := range names {
		i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == n })
		switch {
		case i >= 0:
			if !slices.Contains(idx, i) {
				idx = append(idx, i)
			}
		case slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == n }):
			problems = append(problems, fmt.Sprintf("annotation %s=%s names init container %s: init containers and sidecars are not gated (a sidecar outlives the app anyway); name only containers (%s)",
				AnnotationContainers, quote(v), quote(n), containerNames(pod.Spec.Containers)))
		default:
			problems = append(problems, fmt.Sprintf("annotation %s=%s names %s, not a container of this pod: want a comma-separated list of its containers (%s)",
				AnnotationContainers, quote(v), quote(n), containerNames(pod.Spec.Containers)))
		}
	}
	slices.Sort(idx)
	return idx, problems
}

// containerNames lists containers for a warning, cut short: the API server
// truncates warnings past 256 characters.
func containerNames(cs []corev1.Container) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return truncate(strings.Join(names, ", "), 60)
}

// podConflicts finds what in the pod would clash with what Mutate adds.
func podConflicts(pod *corev1.Pod, s Settings) []string {
	var problems []string
	if pod.Spec.OS != nil && pod.Spec.OS.Name == corev1.Windows {
		problems = append(problems, "a Windows pod: the agent is a Linux binary")
	}
	if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName }) {
		problems = append(problems, fmt.Sprintf("the pod already has a volume named %s", VolumeName))
	}
	if !s.ImageVolume {
		isInstaller := func(c corev1.Container) bool { return c.Name == InstallerName }
		if slices.ContainsFunc(pod.Spec.InitContainers, isInstaller) || slices.ContainsFunc(pod.Spec.Containers, isInstaller) {
			problems = append(problems, fmt.Sprintf("the pod already has a container named %s", InstallerName))
		}
	}
	return problems
}

// identityEnv are the downward-API variables the agent needs, by name.
// They must come from the pod itself: a hand-set value would make the agent
// ask about another pod.
var identityEnv = []struct{ name, field string }{
	{"DRAINGATE_POD_NAME", "metadata.name"},
	{"DRAINGATE_POD_NAMESPACE", "metadata.namespace"},
	{"DRAINGATE_POD_UID", "metadata.uid"},
	{"DRAINGATE_POD_IP", "status.podIP"},
	{"DRAINGATE_HOST_IP", "status.hostIP"},
}

const serverEnv = "DRAINGATE_SERVER"

// containerConflicts finds what in a gated container would clash with what
// Mutate adds to it.
func containerConflicts(c *corev1.Container, s Settings) []string {
	var problems []string
	dir := mountDir(s)
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == dir {
			problems = append(problems, fmt.Sprintf("container %q already mounts something at %s", c.Name, dir))
		}
	}
	for _, id := range identityEnv {
		for _, e := range c.Env {
			if e.Name == id.name && fieldPath(e) != id.field {
				problems = append(problems, fmt.Sprintf("container %q sets %s itself; draingate needs it from the downward API (fieldRef %s)", c.Name, id.name, id.field))
			}
		}
	}
	return problems
}

func fieldPath(e corev1.EnvVar) string {
	if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.Value != "" {
		return ""
	}
	return e.ValueFrom.FieldRef.FieldPath
}

// graceFor is the grace period the pod needs: the agent's longest wait, the
// longest original hook's own time (hooks of different containers run at
// the same time), then the app's shutdown budget, in whole seconds rounded
// up. nil keeps the pod's own, which is never lowered.
func graceFor(current *int64, t timings, gated []gatedContainer) *int64 {
	var own time.Duration
	for _, g := range gated {
		own = max(own, g.hook.own)
	}
	need := int64(math.Ceil((t.maxWait + own + t.budget).Seconds()))
	if need <= ptr.Deref(current, defaultGraceSecs) {
		return nil
	}
	return &need
}

// dnsWarning says when the agent will resolve the gate server's name with
// the node's resolver rather than the cluster's: with hostNetwork under the
// default ClusterFirst policy (which then means Default), or under Default
// itself. Cluster Service names may not resolve there.
func dnsWarning(pod *corev1.Pod, server string) string {
	u, err := url.Parse(server)
	if err != nil || net.ParseIP(u.Hostname()) != nil {
		return ""
	}
	policy := pod.Spec.DNSPolicy
	nodeDNS := policy == corev1.DNSDefault ||
		(pod.Spec.HostNetwork && (policy == "" || policy == corev1.DNSClusterFirst))
	if !nodeDNS {
		return ""
	}
	return fmt.Sprintf("the pod resolves names with the node's DNS (hostNetwork %t, dnsPolicy %s), which may not find the gate server %s; set dnsPolicy: ClusterFirstWithHostNet, or the agent falls back to a fixed wait",
		pod.Spec.HostNetwork, policyName(policy), u.Hostname())
}

func policyName(p corev1.DNSPolicy) string {
	if p == "" {
		return string(corev1.DNSClusterFirst)
	}
	return string(p)
}
