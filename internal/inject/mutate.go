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

	"draingate.dev/draingate/api"
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
	v := pod.Labels[api.LabelInject]
	if v == api.Disabled || (s.ServerNamespace != "" && pod.Namespace == s.ServerNamespace) {
		return false
	}
	return v == api.Enabled || nsLabels[api.LabelInject] == api.Enabled
}

// Mutate returns pod with draingate's agent injected, and warnings for the
// user. It does no I/O and never changes pod: when it injects, out is a
// copy; when it does not, out is pod itself, and the warnings say why where
// the user has something to fix. Opted-out pods and pods in
// s.ServerNamespace come back as they are, without a warning.
//
// A pod injected before (the API server calls the webhook again when a
// later webhook changed the pod) gets only its containers added since
// gated: a mesh proxy that receives the pod's traffic must not stop at
// SIGTERM while the app waits. See planAdded.
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
	if _, done := pod.Annotations[api.AnnotationInjected]; done {
		p, warnings := planAdded(pod, s)
		if p == nil {
			return pod, warnings, nil
		}
		out = pod.DeepCopy()
		p.applyAdded(out, s)
		return out, warnings, nil
	}
	p, warnings := planPod(pod, s)
	if p == nil {
		return pod, warnings, nil
	}
	out = pod.DeepCopy()
	p.apply(out, s)
	return out, warnings, nil
}

// applies rules out pods Mutate leaves alone without a word: the user
// already decided.
func applies(pod *corev1.Pod, s Settings) bool {
	if pod.Labels[api.LabelInject] == api.Disabled {
		return false
	}
	return s.ServerNamespace == "" || pod.Namespace != s.ServerNamespace
}

// planAdded plans, for a pod injected before, the gating of the containers
// the pod's rules pick (named in draingate.dev/containers, else those with
// ports) that do not run the agent yet: containers a later webhook added.
// They wait exactly as the containers gated first (the same max-wait and
// fallback, read from their hooks), each then running its own original
// hook; the volume, the installer and the annotation are there already.
// Nil without a word when no container is new, or when no container runs
// the agent (the annotation alone is not injection draingate made).
func planAdded(pod *corev1.Pod, s Settings) (*plan, []string) {
	var first *agentArgs
	for i := range pod.Spec.Containers {
		if a, ok := agentCommand(&pod.Spec.Containers[i]); ok {
			first = &a
			break
		}
	}
	idx, problems := gatedIndexes(pod)
	fresh := slices.DeleteFunc(idx, func(i int) bool {
		_, gated := agentCommand(&pod.Spec.Containers[i])
		return gated
	})
	if len(fresh) == 0 || first == nil {
		return nil, nil
	}
	t, ps := podTimings(pod, s)
	problems = append(problems, ps...)
	t.maxWait, t.fallback = first.maxWait, first.fallback
	// The token volume is there when the first injection put it there.
	has := func(name string) bool {
		return slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
	}
	p := &plan{t: t, log: first.log, token: has(api.TokenVolumeName), watch: has(api.WatchVolumeName)}
	more, notes := p.gateContainers(pod, fresh, s)
	problems = append(problems, more...)
	if len(problems) > 0 {
		for i, pr := range problems {
			problems[i] = warnPrefix + "the containers added after injection are not gated: " + pr
		}
		return nil, problems
	}
	p.grace = graceFor(pod.Spec.TerminationGracePeriodSeconds, t, p.gated)
	return p, notes
}

// gateContainers plans the gating of the containers idx: each one's
// original hook, what keeps it from being gated (problems) and what the
// user should know (notes).
func (p *plan) gateContainers(pod *corev1.Pod, idx []int, s Settings) (problems, notes []string) {
	for _, i := range idx {
		c := &pod.Spec.Containers[i]
		hook, problem := translateHook(c)
		if problem != "" {
			problems = append(problems, problem)
		}
		if hook.warning != "" {
			notes = append(notes, warnPrefix+hook.warning)
		}
		problems = append(problems, containerConflicts(c, s, p.watch)...)
		p.gated = append(p.gated, gatedContainer{index: i, hook: hook})
	}
	return problems, notes
}

// agentArgs are the flags an injected agent hook waits with.
type agentArgs struct {
	maxWait, fallback time.Duration
	log               bool
}

// agentCommand reads c's preStop hook when it runs the agent (as either
// injection mode installs it), with its flags.
func agentCommand(c *corev1.Container) (agentArgs, bool) {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		return agentArgs{}, false
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) < 2 || cmd[1] != "wait" || cmd[0] != api.AgentDir+"/"+api.AgentFile && cmd[0] != api.ImageDir+api.AgentInImage {
		return agentArgs{}, false
	}
	var a agentArgs
	var okWait, okFallback bool
	for i := 2; i < len(cmd) && cmd[i] != "--"; i++ {
		switch {
		case cmd[i] == "--log":
			a.log = true
		case cmd[i] == "--max-wait" && i+1 < len(cmd):
			d, err := time.ParseDuration(cmd[i+1])
			a.maxWait, okWait = d, err == nil
		case cmd[i] == "--fallback" && i+1 < len(cmd):
			d, err := time.ParseDuration(cmd[i+1])
			a.fallback, okFallback = d, err == nil
		}
	}
	return a, okWait && okFallback
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
	// token gives the agents the pod's projected token (hostNetwork pods).
	token bool
	// watch adds the watcher and points the agents at its socket.
	watch bool
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
	// The agent's lines go to PID 1's stdout, the app's own, unless PID 1
	// is not the app: a shared process namespace (the pause process) or
	// the host's (its init).
	p := &plan{t: t, log: !ptr.Deref(pod.Spec.ShareProcessNamespace, false) && !pod.Spec.HostPID, token: pod.Spec.HostNetwork,
		watch: s.Watcher && !pod.Spec.HostNetwork}
	// A clash costs the watcher, not the gate: without it the agents
	// watch from their hooks on.
	clash := p.watchConflicts(pod)
	p.watch = p.watch && len(clash) == 0
	more, notes := p.gateContainers(pod, idx, s)
	for _, c := range clash {
		notes = append(notes, warnPrefix+"no watcher (the agents watch from their hooks on): "+c)
	}
	problems = append(problems, more...)
	if len(problems) > 0 {
		for i, pr := range problems {
			problems[i] = notInjectedPrefix + pr
		}
		return nil, problems
	}
	if len(idx) == 0 {
		return nil, []string{notInjectedPrefix + "no container declares ports, so none takes traffic to gate; name the containers to gate in annotation " + api.AnnotationContainers}
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
	v, named := pod.Annotations[api.AnnotationContainers]
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
			api.AnnotationContainers, api.Quote(v, maxQuoted), containerNames(pod.Spec.Containers))}
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
				api.AnnotationContainers, api.Quote(v, maxQuoted), api.Quote(n, maxQuoted), containerNames(pod.Spec.Containers)))
		default:
			problems = append(problems, fmt.Sprintf("annotation %s=%s names %s, not a container of this pod: want a comma-separated list of its containers (%s)",
				api.AnnotationContainers, api.Quote(v, maxQuoted), api.Quote(n, maxQuoted), containerNames(pod.Spec.Containers)))
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
	return api.Truncate(strings.Join(names, ", "), 60)
}

// podConflicts finds what in the pod would clash with what Mutate adds.
func podConflicts(pod *corev1.Pod, s Settings) []string {
	var problems []string
	if why := windowsPod(pod); why != "" {
		problems = append(problems, "a Windows pod ("+why+"): the agent is a Linux binary")
	}
	for _, name := range []string{api.VolumeName, api.TokenVolumeName} {
		if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name }) {
			problems = append(problems, fmt.Sprintf("the pod already has a volume named %s", name))
		}
	}
	if !s.ImageVolume {
		isInstaller := func(c corev1.Container) bool { return c.Name == api.InstallerName }
		if slices.ContainsFunc(pod.Spec.InitContainers, isInstaller) || slices.ContainsFunc(pod.Spec.Containers, isInstaller) {
			problems = append(problems, fmt.Sprintf("the pod already has a container named %s", api.InstallerName))
		}
	}
	return problems
}

// watchConflicts finds what in the pod would clash with the watcher.
func (p *plan) watchConflicts(pod *corev1.Pod) []string {
	if !p.watch {
		return nil
	}
	var problems []string
	if slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == api.WatchVolumeName }) {
		problems = append(problems, fmt.Sprintf("the pod already has a volume named %s", api.WatchVolumeName))
	}
	isWatcher := func(c corev1.Container) bool { return c.Name == api.WatcherName }
	if slices.ContainsFunc(pod.Spec.InitContainers, isWatcher) || slices.ContainsFunc(pod.Spec.Containers, isWatcher) {
		problems = append(problems, fmt.Sprintf("the pod already has a container named %s", api.WatcherName))
	}
	return problems
}

// identityEnv are the downward-API variables the agent needs, by name.
// They must come from the pod itself: a hand-set value would make the agent
// ask about another pod.
var identityEnv = []struct{ name, field string }{
	{api.EnvPodName, "metadata.name"},
	{api.EnvPodNamespace, "metadata.namespace"},
	{api.EnvPodUID, "metadata.uid"},
	{api.EnvPodIP, "status.podIP"},
	{api.EnvHostIP, "status.hostIP"},
}

// containerConflicts finds what in a gated container would clash with what
// Mutate adds to it.
func containerConflicts(c *corev1.Container, s Settings, watch bool) []string {
	var problems []string
	dirs := []string{mountDir(s), api.TokenDir}
	if watch {
		dirs = append(dirs, api.WatchDir)
	}
	for _, m := range c.VolumeMounts {
		if d := path.Clean(m.MountPath); slices.Contains(dirs, d) {
			problems = append(problems, fmt.Sprintf("container %q already mounts something at %s", c.Name, d))
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

// windowsPod says how pod targets Windows nodes, or "": spec.os, its
// nodeSelector, or a required node affinity every term of which asks for
// kubernetes.io/os in windows alone.
func windowsPod(pod *corev1.Pod) string {
	const osLabel = "kubernetes.io/os"
	spec := &pod.Spec
	if spec.OS != nil && spec.OS.Name == corev1.Windows {
		return "spec.os"
	}
	if spec.NodeSelector[osLabel] == string(corev1.Windows) {
		return "nodeSelector " + osLabel + "=windows"
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	windowsOnly := func(t corev1.NodeSelectorTerm) bool {
		return slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == osLabel && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 &&
				!slices.ContainsFunc(r.Values, func(v string) bool { return v != string(corev1.Windows) })
		})
	}
	if len(terms) > 0 && !slices.ContainsFunc(terms, func(t corev1.NodeSelectorTerm) bool { return !windowsOnly(t) }) {
		return "required node affinity " + osLabel + " in (windows)"
	}
	return ""
}
