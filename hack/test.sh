#!/usr/bin/env bash
# make test: format and vet checks, then every package's tests. Packages that
# need the cluster start it in their TestMain; -p 1 runs test binaries one at
# a time because there is one cluster per host (one bridge, one set of ports).
# A cluster the tests started is torn down at the end, whatever happens.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# A cluster someone started with `make cluster-up` is used and left running;
# otherwise whatever the tests left (a killed test binary) is torn down.
if [ -f .cluster/state.json ]; then
	echo "test: using the cluster already in .cluster (make cluster-down stops it)"
else
	cleanup() { go run ./cmd/draingate-cluster down || true; }
	trap cleanup EXIT
fi

unformatted=$(gofmt -l $(git ls-files '*.go') 2>&1 || true)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
# Compile every test binary first, in parallel, so -p 1 only serialises runs.
go test -short -count=1 -run '^$' ./... >/dev/null
# Short fuzzing of the parsers that face untrusted input.
go test -run '^$' -fuzz '^FuzzParseDrainRequest$' -fuzztime 10s -fuzzminimizetime 1s ./api/
go test -run '^$' -fuzz '^FuzzParseTraffic$' -fuzztime 10s -fuzzminimizetime 1s ./api/
go test -run '^$' -fuzz '^FuzzParseDump$' -fuzztime 10s -fuzzminimizetime 1s ./internal/traffic/
go test -run '^$' -fuzz '^FuzzHandler$' -fuzztime 10s -fuzzminimizetime 1s ./internal/inject/
go test -p 1 -count=1 -timeout 60m "$@" ./...
