// Package inject adds draingate's preStop agent to pods: Mutate is the pod
// mutation as a pure function, Patch turns its result into a JSON patch, and
// NewHandler serves both as a mutating admission webhook on pod CREATE.
//
// # What an injected pod gets
//
//   - a volume "draingate-agent" holding the agent: an emptyDir (size-limited)
//     filled by an init container "draingate-agent-install" that runs
//     `/bin/draingate-prestop install /draingate`, placed first among the
//     init containers; or, with Settings.ImageVolume, the agent's image
//     mounted as an OCI image volume, with no init container at all;
//   - in each gated container: a read-only mount of that volume, the pod's
//     identity from the downward API (DRAINGATE_POD_NAME, _NAMESPACE, _UID,
//     _POD_IP, _HOST_IP) and DRAINGATE_SERVER (one the user set wins);
//   - in each gated container, a preStop exec hook
//     `draingate-prestop wait --max-wait D --fallback D --log /proc/1/fd/1`
//     followed by the container's original hook, which the agent runs after
//     the wait;
//   - terminationGracePeriodSeconds raised (never lowered) to max-wait + the
//     original hook's own time + the app's shutdown budget, so the kubelet
//     never kills a pod the agent is still entitled to hold;
//   - the annotation draingate.dev/injected=<version>, which makes Mutate
//     idempotent.
//
// # Which pods, which containers
//
// A pod is wanted (Wanted) when it or its namespace carries the label
// draingate.dev/inject=enabled, it does not carry draingate.dev/inject=disabled,
// and it is not in draingate's own namespace (the gate server must never wait
// on itself). Gated containers are those that declare ports (traffic reaches
// containers, and a container without ports takes none), or exactly those
// named in the annotation draingate.dev/containers. Init containers and
// native sidecars are never gated: a sidecar only stops after every app
// container has exited, so it outlives the app's wait anyway.
//
// # All or nothing
//
// A pod is either injected as a whole or returned exactly as it came, with a
// warning that says why and what to change. A half-injected pod would carry
// the "injected" annotation while some of its traffic still meets an early
// SIGTERM, which is worse than an honest "not injected". So anything Mutate
// cannot do faithfully leaves the pod untouched: an invalid annotation, an
// unknown container name, an original hook the agent cannot reproduce, a
// name or path draingate needs that the pod already uses. The webhook admits
// such pods (with the warning); only programming or configuration errors are
// errors.
//
// # Original hooks
//
// The agent runs the container's original preStop hook after its wait; the
// kubelet only runs the exec hook that wraps it. How each kind maps:
//
//   - exec: passed after "--", argv exactly as written. The agent starts it
//     with the container's environment, PATH and working directory, as the
//     kubelet's exec would.
//   - sleep: --then-sleep; its seconds count into the grace period.
//   - httpGet, http scheme, no headers, no host: --then-http-get
//     http://127.0.0.1:PORT/PATH, the port resolved as the kubelet does (a
//     number, or a name among the container's own ports; unresolvable means
//     not injected). The kubelet would call the pod IP from the node. The
//     agent cannot: a lifecycle exec command gets no $(VAR) expansion, and
//     passing the IP through an expanded environment variable breaks on IPv6
//     pods (an unbracketed IPv6 literal is not a URL, and the agent skips its
//     whole wait on a flag it cannot parse). Loopback reaches every app that
//     listens on all addresses, which is nearly every app in a container; an
//     app that binds only the pod IP would not get the call (the call fails,
//     is logged by the agent, and termination goes on).
//   - httpGet with https, with httpHeaders, or with a host: not injected. The
//     agent speaks plain HTTP without custom headers, so it would send a
//     different request; and a hook with a host is called by the kubelet from
//     the node, which nothing inside the pod can reproduce. (Pod Security
//     baseline forbids that host field from Kubernetes 1.34; rewriting it into
//     an exec would also let such a pod past a policy it fails as written.)
//     The warning suggests an exec hook, or leaving that container out through
//     draingate.dev/containers.
//   - tcpSocket (deprecated): the kubelet never runs it ("TCPSocket is NOT
//     supported as a LifecycleHandler"; the hook just fails), so the agent's
//     wait replaces it and a warning says so. With a host set it is not
//     injected, for the policy reason above.
//
// # Special pods
//
//   - hostNetwork: injected as any pod. The downward API works the same (the
//     pod IP is the node's), and an httpGet hook's 127.0.0.1 is then the
//     node's loopback, where an app listening on all addresses still answers.
//     But the default dnsPolicy ClusterFirst gives hostNetwork pods the node's
//     resolver, which may not know cluster Service names: Mutate warns when
//     the gate server's URL is a name and the pod's resolver is the node's
//     (hostNetwork without ClusterFirstWithHostNet, or dnsPolicy Default). The
//     agent then falls back to its fixed wait; injection still goes ahead.
//   - shareProcessNamespace: PID 1 is the pause process, so the agent does not
//     log to /proc/1/fd/1 (its lines would go nowhere useful).
//   - Windows pods (spec.os.name=windows): not injected; the agent is a Linux
//     binary.
//   - Pods from generateName have no name at admission: nothing here needs
//     it, the agent reads its pod's name from the downward API at run time.
//
// # Admission
//
// NewHandler admits every pod: a pod it cannot inject goes through unchanged
// with a warning (kubectl shows it), as does any request it should not have
// been sent. Only a body that is not an AdmissionReview gets a 4xx, and only
// failures on draingate's side (unusable Settings, the namespace lookup) a
// 500, which the webhook's failurePolicy turns into admission (Ignore, the
// default) or refusal, as the operator chose. The patch touches only what
// Mutate changed (see Patch for how it stays correct when the API server is
// newer than this build), and a pod whose preStop handler has a field this
// build does not know is not injected, so that hook is never dropped.
//
// The init container passes Pod Security "restricted" (non-root user 65532,
// no privilege escalation, all capabilities dropped, RuntimeDefault seccomp,
// read-only root filesystem) and asks for little (10m CPU, 16Mi memory, as
// requests and limits, so namespaces with quotas accept it).
package inject
