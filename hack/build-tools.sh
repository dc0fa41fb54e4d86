#!/usr/bin/env bash
# Builds the binaries the test cluster and the lab run: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl
# (Kubernetes v1.37.2), etcd and CoreDNS, all static (CGO_ENABLED=0), from the
# scratch modules under hack/tools, through the Go module proxy.
#
# The result is cached outside the clone, in
#   ${DRAINGATE_CACHE:-$HOME/.cache/draingate}/tools/<hash of the inputs>/bin
# so that a fresh clone on the same machine (CI) reuses it; .tools in the
# repository links to it. Idempotent: a second run only relinks.
# Cold build on 2 cores: about 20 minutes.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DRAINGATE_CACHE:-$HOME/.cache/draingate}/tools
k8s_version=v1.37.2

command -v go >/dev/null || { echo "build-tools: go not found in PATH" >&2; exit 1; }

hash=$(
	{
		cat "${BASH_SOURCE[0]}"
		cd "$root/hack/tools"
		find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs cat
		go version
	} | sha256sum | cut -c1-16
)
dest=$cache/$hash

if [ -x "$dest/bin/kubelet" ] && [ -f "$dest/complete" ]; then
	ln -sfn "$dest" "$root/.tools"
	echo "build-tools: cached in $dest"
	exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-$hash-XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
step() { printf 'build-tools: %s (%ds so far)\n' "$*" $((SECONDS - start)); }

ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=37 -X $p.gitTreeState=clean"
done

export CGO_ENABLED=0
step "building Kubernetes $k8s_version (the long part: ~15-20 min cold on 2 cores)"
(cd "$root/hack/tools/kube" && go build -trimpath -ldflags "$ld" -o "$tmp/bin/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubelet \
	k8s.io/kubernetes/cmd/kube-proxy \
	k8s.io/kubernetes/cmd/kubectl)
step "building etcd"
(cd "$root/hack/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" .)
step "building CoreDNS"
(cd "$root/hack/tools/coredns" && go build -trimpath -ldflags "-s -w" -o "$tmp/bin/coredns" .)

for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd coredns; do
	[ -x "$tmp/bin/$b" ] || { echo "build-tools: $b was not built" >&2; exit 1; }
done
touch "$tmp/complete"
# A concurrent build may have finished first: keep whichever landed.
if ! mv -T "$tmp" "$dest" 2>/dev/null; then
	[ -f "$dest/complete" ] || { echo "build-tools: cannot move the build to $dest" >&2; exit 1; }
fi
trap - EXIT
# Older builds are of no use once this one landed.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -exec rm -rf {} +
ln -sfn "$dest" "$root/.tools"
step "done: $dest/bin"
