#!/usr/bin/env bash
# Installs the Debian packages the test cluster runs on the host: containerd
# (with ctr and the runc shim), runc, the CNI plugins, iptables and iproute2.
# Idempotent: installs only what is missing.
set -euo pipefail

declare -A need=(
	[containerd]=containerd
	[containerd-shim-runc-v2]=containerd
	[ctr]=containerd
	[runc]=runc
	[/usr/lib/cni/bridge]=containernetworking-plugins
	[/usr/lib/cni/host-local]=containernetworking-plugins
	[iptables]=iptables
	[ip]=iproute2
)
missing=()
for cmd in "${!need[@]}"; do
	if ! command -v "$cmd" >/dev/null 2>&1; then
		missing+=("${need[$cmd]}")
	fi
done
[ ${#missing[@]} -eq 0 ] && { echo "install-deps: all present"; exit 0; }
pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing packages: $pkgs; run as root (sudo make deps)" >&2
	exit 1
fi
echo "install-deps: installing $pkgs"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq || ! apt-get install -y -qq --no-install-recommends $pkgs; then
	echo "install-deps: apt-get could not install: $pkgs" >&2
	exit 1
fi
