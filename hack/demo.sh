#!/usr/bin/env bash
# make demo: the lab's default scenario (alb) with the strategies none,
# sleep:5s, sleep:30s and draingate on the project's own cluster. Starts the cluster if
# none runs (and stops it after), prints the table, and writes out/demo.json
# and out/demo.png. Extra arguments go to `draingate-lab run`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "$(id -u)" -ne 0 ]; then
	echo "demo: the lab runs a kubelet and containerd and needs root (sudo make demo)" >&2
	exit 1
fi
mkdir -p out
go build -o bin/draingate-lab ./cmd/draingate-lab
exec bin/draingate-lab run --json out/demo.json --png out/demo.png "$@"
