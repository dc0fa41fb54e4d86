// Package testenv runs a real one-node Kubernetes cluster on this machine
// for tests and the lab: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd with runc, the kubelet, kube-proxy (iptables),
// a CNI bridge and CoreDNS, from binaries hack/build-tools.sh built and
// images built offline from the project's own static binaries.
//
// Start returns a cluster whose node is Ready, whose DNS answers and whose
// ServiceAccount tokens authenticate, or an error naming the part that failed
// with the tail of its log. Down undoes everything a run did to the host —
// processes, pods, mounts, network devices, iptables chains, cgroups,
// sysctls, files — also for a run whose owner was killed, because every
// change is recorded in the run folder before it is made.
//
// It never touches what it did not create: processes are stopped by the PIDs
// it recorded, only iptables chains that did not exist before the run are
// removed (no table is flushed), and sysctls are restored to the values read
// before the run. Production packages never import it.
package testenv
