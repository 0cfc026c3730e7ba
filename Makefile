# KOS — thin entry points; each target runs one go command or one script in tools/.
SHELL := /usr/bin/env bash
export GOTOOLCHAIN := local

.PHONY: all build test unit integration cluster fuzz verify generate addons release render images demo demo-down demo-cluster demo-cluster-down bench tools clean

all: build

## build: compile every binary into bin/
build:
	go build -o bin/ ./cmd/...

## test: what CI runs — install and build what the tests need, verify, then the unit, integration and cluster lanes
test:
	tools/test.sh

## unit: every test but TestIntegration*; starts no server (seconds to a minute once compiled)
unit:
	tools/lanes.sh unit

## integration: TestIntegration* that need a control plane, Open vSwitch or S3, but no node (make tools first)
integration:
	tools/lanes.sh integration

## cluster: the packages whose tests start nodes, one package at a time (make tools first)
cluster:
	tools/lanes.sh cluster

## fuzz: run every fuzz target for FUZZTIME each (default 1m; make test runs each for 5000 inputs)
fuzz:
	tools/fuzz.sh

## verify: formatting, vet, import directions, generated code drift
verify:
	tools/verify.sh

## generate: rewrite generated code
generate:
	tools/codegen/generate.sh

## addons: render addons/source into the newest release's manifests, fill in the manifest hashes of new addon releases, rewrite bootstrap-channel.yaml, and lint the channels
addons:
	go run ./tools/addons generate

## release: write a release to publish (its channels must pass channels lint): make release REGISTRY=registry.example.com/kos OUT=dir [VERSION=0.2.0] [FLAVOR=local] [SET="kos-etcd.storage=10Gi ..."]
release:
	go run ./tools/addons release --registry "$(REGISTRY)" --out "$(OUT)" $(if $(VERSION),--version "$(VERSION)") $(if $(FLAVOR),--flavor "$(FLAVOR)") $(foreach s,$(SET),--set "$(s)")

## render: render the newest release configured by an operator's file, as kos-release does: make render OUT=dir [CONFIG=release-config.yaml]
render:
	go run ./cmd/kos-release render --out "$(OUT)" $(if $(CONFIG),--config "$(CONFIG)")

## images: build the KOS images without a container engine and import them into the local cluster's node (go run ./tools/localenv up --cluster)
images:
	go run ./tools/kosimages --import localenv

## demo: the main job on the embedded local environment
demo:
	tools/demo/run.sh

## demo-down: stop everything the demo started
demo-down:
	tools/demo/down.sh

## demo-cluster: the whole product on a real three-node cluster with a registry
demo-cluster:
	tools/demo/cluster.sh

## demo-cluster-down: stop everything demo-cluster started
demo-cluster-down:
	tools/demo/cluster-down.sh

## bench: benchmarks (figures are recorded in docs/benchmarks.md)
bench:
	tools/bench.sh

## tools: build the servers the tests run (cached by version under .cache/)
tools:
	tools/kube/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy && tools/kube129/build.sh && tools/kube130/build.sh && tools/versitygw/build.sh && tools/kops/build.sh && tools/multus/build.sh && tools/prometheus/build.sh

clean:
	rm -rf bin
