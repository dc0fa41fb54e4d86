# draingate — see README.md. Every target does its own setup on a fresh machine.
GO ?= go
# VERSION is stamped into the binaries (draingate version, the injected pods'
# draingate.dev/injected annotation).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X draingate.dev/draingate/internal/version.Version=$(VERSION)

.PHONY: all build test unit tools deps cluster-up cluster-down demo images chart plugin fmt vet clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

## deps: Debian packages the test cluster needs on the host (containerd, runc, CNI plugins, iptables),
## and HAProxy for the lab's ingress scenario, unpacked from Debian's package under the cache (not installed)
deps:
	hack/install-deps.sh
	hack/install-haproxy.sh

## tools: Kubernetes, etcd and CoreDNS binaries, built once and cached outside the clone
tools:
	hack/build-tools.sh

## test: everything, on a real one-node cluster (needs root)
test: deps tools
	hack/test.sh

## unit: the tests that need no cluster
unit:
	$(GO) test -short -count=1 ./...

## images: release images of draingate and draingate-prestop for linux/amd64 and linux/arm64,
## offline and reproducible (SOURCE_DATE_EPOCH, default the last commit's time), as OCI layouts
## with CycloneDX SBOMs under out/images, their digests in out/images/digests.txt;
## PUSH=registry/prefix also pushes them
images:
	$(GO) run ./cmd/draingate-release images --out out/images --version $(VERSION) $(if $(PUSH),--push $(PUSH))

## chart: the Helm chart packaged as out/draingate-<chart version>.tgz (appVersion $(VERSION), the
## images' default tag); IMAGES=registry/prefix sets its default image repositories (where
## make images PUSH=… pushed them); PUSH=oci://registry/prefix pushes the package (its digest
## in out/chart-digests.txt); the images make images built (out/images) are pinned by digest
## (image.digest, agent.image.digest)
chart:
	$(GO) run ./cmd/draingate-release chart --out out --version $(VERSION) --digests-from out/images $(if $(IMAGES),--images $(IMAGES)) $(if $(PUSH),--push $(PUSH))

## plugin: the kubectl plugin (kubectl draingate status/explain) for linux, macOS and Windows,
## amd64 and arm64, as out/plugin/kubectl-draingate-<os>-<arch> with out/plugin/SHA256SUMS
plugin:
	$(GO) run ./cmd/draingate-release plugin --out out/plugin --version $(VERSION)

cluster-up: deps tools
	$(GO) run ./cmd/draingate-cluster up

cluster-down:
	$(GO) run ./cmd/draingate-cluster down

demo: deps tools
	hack/demo.sh $(ARGS)

fmt:
	gofmt -l -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean: cluster-down
	rm -rf bin
