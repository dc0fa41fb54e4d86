package inject

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
)

// The changes Mutate makes, once the plan is made: the agent's volume, its
// installer, and each gated container's hook and environment.

// mountDir is where gated containers see the agent's volume.
func mountDir(s Settings) string {
	if s.ImageVolume {
		return api.ImageDir
	}
	return api.AgentDir
}

// agentPath is the agent's executable as a gated container sees it.
func agentPath(s Settings) string {
	if s.ImageVolume {
		return api.ImageDir + api.AgentInImage
	}
	return api.AgentDir + "/" + api.AgentFile
}

// apply makes the planned changes to pod, a copy Mutate owns.
func (p *plan) apply(pod *corev1.Pod, s Settings) {
	spec := &pod.Spec
	spec.Volumes = append(spec.Volumes, agentVolume(s))
	if p.token {
		spec.Volumes = append(spec.Volumes, tokenVolume())
	}
	if !s.ImageVolume {
		// First: the installer needs nothing from any other init container,
		// and a native sidecar (restartPolicy Always) holds back every init
		// container after it until its startup probe passes; placed first,
		// the copy (milliseconds) is done before anything else starts, and
		// nothing the user's init containers do can keep it from running.
		spec.InitContainers = append([]corev1.Container{installer(s)}, spec.InitContainers...)
	}
	if p.watch {
		// Right after the installer (or first): it starts in
		// milliseconds, and the sooner it watches the longer the history.
		spec.Volumes = append(spec.Volumes, watchVolume())
		at := 0
		if !s.ImageVolume {
			at = 1
		}
		spec.InitContainers = slices.Insert(spec.InitContainers, at, watcher(s))
	}
	for _, n := range s.PullSecrets {
		if !slices.ContainsFunc(spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == n }) {
			spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: n})
		}
	}
	for _, g := range p.gated {
		p.gate(&spec.Containers[g.index], g.hook, s)
	}
	if p.grace != nil {
		spec.TerminationGracePeriodSeconds = ptr.To(*p.grace)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[api.AnnotationInjected] = s.Version
	if s.SizedBy != "" {
		pod.Annotations[api.AnnotationMaxWaitSized] = p.t.maxWait.String() + ": " + s.SizedBy
	} else {
		delete(pod.Annotations, api.AnnotationMaxWaitSized) // the webhook's own, copied from another pod
	}
}

// applyAdded gates the containers planAdded picked, in a pod whose volume
// and installer are there already.
func (p *plan) applyAdded(pod *corev1.Pod, s Settings) {
	for _, g := range p.gated {
		p.gate(&pod.Spec.Containers[g.index], g.hook, s)
	}
	if p.grace != nil {
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(*p.grace)
	}
}

// gate makes c run the agent as its preStop hook.
func (p *plan) gate(c *corev1.Container, hook original, s Settings) {
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: api.VolumeName, MountPath: mountDir(s), ReadOnly: true})
	c.Env = append(c.Env, missingEnv(c.Env, s.Server)...)
	cmd := []string{agentPath(s), "wait", "--max-wait", p.t.maxWait.String(), "--fallback", p.t.fallback.String()}
	if p.token {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: api.TokenVolumeName, MountPath: api.TokenDir, ReadOnly: true})
		cmd = append(cmd, "--token-file", api.TokenDir+"/"+api.TokenFile)
	}
	if p.log {
		cmd = append(cmd, "--log", agentLogPath)
	}
	if p.watch {
		// The socket goes by the environment, not the command line: an
		// agent older than this server (an image pinned to an earlier
		// release) ignores a variable it does not know, where a flag it
		// does not know would cost the wait.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: api.WatchVolumeName, MountPath: api.WatchDir, ReadOnly: true})
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == api.EnvWatchSocket }) {
			c.Env = append(c.Env, corev1.EnvVar{Name: api.EnvWatchSocket, Value: api.WatchDir + "/" + api.WatchSocket})
		}
	}
	cmd = append(cmd, hook.then...)
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	c.Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

// missingEnv is the agent's environment less what env already has: an
// identity variable there is the same fieldRef (containerConflicts checked),
// and a DRAINGATE_SERVER the user set wins.
func missingEnv(env []corev1.EnvVar, server string) []corev1.EnvVar {
	has := func(name string) bool {
		return slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	}
	var add []corev1.EnvVar
	for _, id := range identityEnv {
		if !has(id.name) {
			add = append(add, corev1.EnvVar{Name: id.name, ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: id.field},
			}})
		}
	}
	if !has(api.EnvServer) {
		add = append(add, corev1.EnvVar{Name: api.EnvServer, Value: server})
	}
	return add
}

func agentVolume(s Settings) corev1.Volume {
	if s.ImageVolume {
		return corev1.Volume{Name: api.VolumeName, VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: s.AgentImage, PullPolicy: corev1.PullIfNotPresent},
		}}
	}
	return corev1.Volume{Name: api.VolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(s.EmptyDirSizeLimit.DeepCopy())},
	}}
}

// tokenVolume is the hostNetwork pod's projected ServiceAccount token, bound
// to the pod, for the gate server alone (its audience).
func tokenVolume() corev1.Volume {
	return corev1.Volume{Name: api.TokenVolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: api.TokenAudience, ExpirationSeconds: ptr.To[int64](tokenSeconds), Path: api.TokenFile,
		}}},
	}}}
}

// watchVolume holds the watcher's socket, nothing else.
func watchVolume() corev1.Volume {
	return corev1.Volume{Name: api.WatchVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))},
	}}
}

// watcher is the native sidecar that watches the pod's traffic from its
// start (Settings.Watcher). It never exits on its own (a sidecar that
// restarts makes the pod not ready meanwhile), has no probes (a sidecar
// without one is ready once started), and like the installer passes Pod
// Security "restricted" on its own.
func watcher(s Settings) corev1.Container {
	c := installer(s)
	c.Name = api.WatcherName
	c.Command = []string{api.AgentInImage, "watch", "--socket", api.WatchDir + "/" + api.WatchSocket}
	if l, ok := s.WatcherResources.Limits[corev1.ResourceMemory]; ok && l.Value() > 0 {
		// The Go runtime's soft limit, under the container's: it
		// collects harder before the kernel kills it.
		c.Command = append(c.Command, "--memory-limit", strconv.FormatInt(l.Value()/4*3, 10))
	}
	c.VolumeMounts = []corev1.VolumeMount{{Name: api.WatchVolumeName, MountPath: api.WatchDir}}
	c.Resources = *s.WatcherResources.DeepCopy()
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

// installer is the init container that copies the agent into the emptyDir.
// It passes Pod Security "restricted" on its own, so it never is the reason
// a pod is refused; its resources are Settings.InstallerResources (by
// default requests equal to limits, so quotas accept it).
func installer(s Settings) corev1.Container {
	return corev1.Container{
		Name:            api.InstallerName,
		Image:           s.AgentImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{api.AgentInImage, "install", api.AgentDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: api.VolumeName, MountPath: api.AgentDir}},
		Resources:       *s.InstallerResources.DeepCopy(),
		// A failed install shows its own words in the pod's status.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(int64(installerUser)),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}
