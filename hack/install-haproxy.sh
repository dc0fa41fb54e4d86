#!/usr/bin/env bash
# Unpacks HAProxy, the real proxy the lab's `ingress` scenario runs as an
# in-cluster ingress, from Debian's packages without installing them:
# apt-get download fetches haproxy and the libraries it links that a minimal
# Debian lacks, dpkg -x unpacks them under
#   ${DRAINGATE_CACHE:-$HOME/.cache/draingate}/haproxy/<version>
# and .haproxy in the repository links to it. Nothing is installed
# system-wide and no service is started: the lab starts its own HAProxy
# processes and stops them by their PIDs. Idempotent: a second run only
# relinks.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DRAINGATE_CACHE:-$HOME/.cache/draingate}/haproxy
pkgs=(haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1)

for d in "$cache"/*/; do
	if [ -f "$d/complete" ] && "$d/bin/haproxy" -v >/dev/null 2>&1; then
		ln -sfn "${d%/}" "$root/.haproxy"
		echo "install-haproxy: cached in ${d%/}"
		exit 0
	fi
done

command -v apt-get >/dev/null || { echo "install-haproxy: needs apt-get (Debian or Ubuntu); or link .haproxy/bin/haproxy to an HAProxy 2.4 or newer" >&2; exit 1; }
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.unpack-XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
download() { (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "${pkgs[@]}" >/dev/null); }
if ! download; then
	[ "$(id -u)" -eq 0 ] || { echo "install-haproxy: apt-get download failed; run as root (its package lists may need apt-get update)" >&2; exit 1; }
	apt-get update -qq
	download || { echo "install-haproxy: apt-get could not download ${pkgs[*]}" >&2; exit 1; }
fi
for f in "$tmp"/*.deb; do dpkg -x "$f" "$tmp/root"; done
rm -f "$tmp"/*.deb
libdir=$(dirname "$(find "$tmp/root/usr/lib" -name 'liblua5.3.so.0' | head -n1)")
mkdir -p "$tmp/bin"
# The wrapper finds the unpacked libraries wherever the directory lands.
cat > "$tmp/bin/haproxy" <<WRAP
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")/..
LD_LIBRARY_PATH=\$here/root/${libdir#"$tmp/root/"}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$here/root/usr/sbin/haproxy" "\$@"
WRAP
chmod 755 "$tmp/bin/haproxy"
version=$("$tmp/bin/haproxy" -v | awk 'NR==1 {print $3}')
[ -n "$version" ] || { echo "install-haproxy: the unpacked haproxy does not run:" >&2; "$tmp/bin/haproxy" -v >&2; exit 1; }
touch "$tmp/complete"
dest=$cache/$version
rm -rf "$dest"
mv -T "$tmp" "$dest"
trap - EXIT
ln -sfn "$dest" "$root/.haproxy"
echo "install-haproxy: HAProxy $version in $dest"
