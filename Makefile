# holdfast: `make help` lists every target.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# The control plane the tests run against is built from this module's graph.
K8S_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" { print $$2; exit }' go.mod)
K8S_BIN := $(CURDIR)/bin/k8s/$(K8S_VERSION)
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(CURDIR)/bin/tools/controller-gen-$(CONTROLLER_GEN_VERSION)
# promtool checks and unit-tests the chart's alert rules (test/chart); built
# without service discovery (remove_all_sd), which it does not need here.
PROMTOOL_VERSION := v0.316.0
PROMTOOL := $(CURDIR)/bin/tools/promtool-$(PROMTOOL_VERSION)
TEST_TIMEOUT ?= 25m
# The failover drills make test-e2e runs again against holdfast installed by
# its chart (HOLDFAST_E2E_INSTALL=chart): those run green that way
# (docs/benchmarks.md). A chart run needs a cluster of its own, about 5.5
# minutes for one drill on 2 cores, so make test's smoke stays with the
# processes install. This run is one cluster for all of them, about 50
# minutes on 2 cores: the cluster and the chart 1-2.5 min (images cached or
# not), the control-plane partitions about 14 min (one lasts ten minutes),
# the grantor leader's partition about 4, every standby failing about 3, the
# rest 0.1-2.7 each, the twenty SIGKILLs of the grantor leader's pod about 7.5.
CHART_DRILLS := TestPrimaryNodeCut|TestControlPlanePartition|TestRuntimeSIGSTOPFencesBeforeTheStandbyWrites|TestAsymmetricPartitionFailsOverWithOneWriter|TestGrantorLeaderPartitionedFromTheRuntimesLetsOneWrite
CHART_DRILLS := $(CHART_DRILLS)|TestWebhookDownDuringAFailover|TestRollingRestartOfEveryComponentFencesNothing|TestKubeletStoppedKeepsTheLease
CHART_DRILLS := $(CHART_DRILLS)|TestAPIServerRestartWhileHoldingFencesNothing|TestAPIServerRestartDuringARebindEndsWithOneHolder
CHART_DRILLS := $(CHART_DRILLS)|TestManualFailoverThroughKubectlHoldfast|TestEveryStandbyFailingSuspendsFailover
CHART_DRILLS := $(CHART_DRILLS)|TestFieldPartitionKeepsTheLeaseAndShowsTheDeviceLost|TestABystanderOnThePlantNetworkCannotGrant
CHART_DRILLS := $(CHART_DRILLS)|TestALeaseShortenedOnAHeldUnitThenCutKeepsOneWriter|TestAnAutonomyUnitSwitchedToFailoverThenCutKeepsOneWriter
CHART_DRILLS := $(CHART_DRILLS)|TestBrokerAwayDuringRebindDoesNotDelayTheNewHolder|TestCouplerUnreachableAtStartupHoldsTheLeaseAndWritesLater
CHART_DRILLS := $(CHART_DRILLS)|TestDeletedUnitsRuntimePodIsGarbageCollected|TestGrantorLeaderSIGKILLedNeverFences
CHART_DRILLS := $(CHART_DRILLS)|TestAWarmStandbyNeverWritesBeforeItsEpoch|TestAWarmStandbyIsPromotedWithoutAPod
# The voter swap drill make test-e2e runs against the chart-installed components.
CHART_VOTER_DRILLS := TestRoleSwap$$
# The voter swap drills make test-e2e runs again on the kubeadm layout
# (HOLDFAST_E2E_VOTERS_LAYOUT=staticpod: the members static pods on their
# kubelets, holdfast-node's StaticPod actuator): the full swap with writes
# throughout and the former member promoted again into the one cluster
# (TestRoleSwap), and the rollback of a learner that never starts.
STATICPOD_VOTER_DRILLS := ^(TestRoleSwap|TestRoleSwapBlockedPeer)$$
GO_TEST_FLAGS ?=

# The release this tree builds. The chart's appVersion is the one place it
# is written; every binary is stamped with it (--version, holdfast_build_info).
VERSION ?= v$(shell awk '$$1 == "appVersion:" { gsub(/"/, "", $$2); print $$2; exit }' charts/holdfast/Chart.yaml)
LDFLAGS := -X github.com/holdfast-io/holdfast/internal/version.Version=$(VERSION)
BIN_DIR ?= bin

export KUBEBUILDER_ASSETS := $(K8S_BIN)
# The chart checks generate third-party CRDs (test/chart) with it.
export CONTROLLER_GEN
export PROMTOOL

.PHONY: help
help: ## Show every target and what it does
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build every binary under cmd/ into bin/ (BIN_DIR), stamped with VERSION (the chart's appVersion)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN_DIR)/ ./cmd/...

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code (api/, scheduler plugin args) and the CRDs (into charts/holdfast/files/crds, which templates/crds.yaml renders)
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) object paths=./scheduler-plugin/apis/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=charts/holdfast/files/crds

.PHONY: verify
verify: $(CONTROLLER_GEN) ## Fail on stale generated files, gofmt/go vet findings, or an untidy go.mod
	CONTROLLER_GEN=$(CONTROLLER_GEN) hack/verify.sh

.PHONY: k8s-bin
k8s-bin: ## Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd and the kubelet from the module graph into bin/k8s/<version>
	hack/build-k8s-bin.sh

.PHONY: node-deps
node-deps: ## Install the Debian packages the node-plugin tests need (dbus, libseccomp-dev), when missing
	hack/install-node-deps.sh

.PHONY: modbus-deps
modbus-deps: ## Install Debian's python3-pymodbus, the Modbus TCP server the runtime's driver is tested against, when missing
	hack/install-modbus-deps.sh

.PHONY: opcua-deps
opcua-deps: ## Install node-opcua's server (test/opcuaserver, with Debian's nodejs and npm when missing), the OPC UA server the runtime's driver's secured session is tested against
	hack/install-opcua-deps.sh

.PHONY: cri-bin
cri-bin: node-deps ## Build containerd v2, its runc shim, ctr and runc from their Go modules into bin/cri/<versions>
	hack/build-cri-bin.sh

.PHONY: cni-bin
cni-bin: ## Build the CNI plugins the e2e cluster's nodes name (test/cluster) into bin/cni/<version>
	hack/build-cni-bin.sh

.PHONY: test-unit
test-unit: node-deps $(PROMTOOL) ## Run the tests that need no control plane
	$(GO) test -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) ./...

.PHONY: test-integration
test-integration: k8s-bin node-deps modbus-deps opcua-deps cri-bin cni-bin $(CONTROLLER_GEN) $(PROMTOOL) ## Run only the packages with tests against the real apiserver, etcd and kubectl
	$(GO) test -tags integration -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) $$(hack/integration-packages.sh)

.PHONY: test
test: k8s-bin node-deps modbus-deps opcua-deps cri-bin cni-bin $(CONTROLLER_GEN) $(PROMTOOL) ## Run everything CI runs: unit and integration tests (the README's test command)
	$(GO) test -tags integration -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: k8s-bin node-deps modbus-deps opcua-deps cri-bin cni-bin $(CONTROLLER_GEN) $(PROMTOOL) ## Run everything make test runs plus the long drills (build tag e2e): the matrix on real kubelets (once with owner-epoch devices, once with plain ones, the failover drills of CHART_DRILLS again against the chart-installed components), the voter swap drills (CHART_VOTER_DRILLS again against the chart-installed components, STATICPOD_VOTER_DRILLS again on the kubeadm layout)
	$(GO) test -tags integration,e2e -timeout 90m $(GO_TEST_FLAGS) ./...
	HOLDFAST_E2E_DEVICE=plain $(GO) test -tags integration,e2e -timeout 90m $(GO_TEST_FLAGS) ./test/e2e/
	HOLDFAST_E2E_INSTALL=chart HOLDFAST_E2E_DEVICE=plain $(GO) test -tags integration,e2e -timeout 90m $(GO_TEST_FLAGS) -run '$(CHART_DRILLS)' ./test/e2e/
	HOLDFAST_E2E_INSTALL=chart $(GO) test -tags integration,e2e -timeout 30m $(GO_TEST_FLAGS) -run '$(CHART_VOTER_DRILLS)' ./test/e2e/voters/
	HOLDFAST_E2E_VOTERS_LAYOUT=staticpod $(GO) test -tags integration,e2e -timeout 40m $(GO_TEST_FLAGS) -run '$(STATICPOD_VOTER_DRILLS)' ./test/e2e/voters/

SEEDS ?= 1000
SIM_FLAGS ?=

.PHONY: sim
sim: ## Search SEEDS seeds of the lease simulation for two writers, and run its liveness seeds (test/sim, docs/safety.md); SIM_FLAGS passes -sim.* flags (e.g. -sim.without=recreate)
	$(GO) test ./test/sim -run 'TestSimulationFindsNoTwoWriters|TestSimulationLiveness' -count=1 -timeout 0 -v -args -sim.seeds=$(SEEDS) -sim.focused=$$(( $(SEEDS) / 10 + 1 )) -sim.liveness=$$(( $(SEEDS) / 10 + 1 )) $(SIM_FLAGS)

.PHONY: bench
bench: k8s-bin node-deps cri-bin ## Run the component benchmarks (not the e2e ones) with the commands docs/benchmarks.md quotes; BENCH_ONLY=<regexp> picks some
	hack/bench.sh

.PHONY: bench-e2e
bench-e2e: k8s-bin node-deps cri-bin cni-bin ## Run the e2e benchmarks on real kubelets (results in docs/benchmarks.md): the failovers, then the voter swap's phases against the chart-installed components (the demo's)
	$(GO) test -tags integration,e2e -timeout 60m -run '^$$' -bench . -benchtime 3x -v $(GO_TEST_FLAGS) ./test/e2e/
	HOLDFAST_E2E_INSTALL=chart $(GO) test -tags integration,e2e -timeout 60m -run '^$$' -bench BenchmarkVoterSwapPhases -benchtime 3x -v $(GO_TEST_FLAGS) ./test/e2e/voters/

.PHONY: demo
demo: k8s-bin node-deps cri-bin cni-bin ## Start a local cluster of real kubelets, install holdfast with its chart, fail a unit over, print the timeline, swap an etcd voter and print its steps; Ctrl-C cleans up
	$(GO) run ./test/e2e/demo

$(PROMTOOL):
	GOBIN=$(CURDIR)/bin/tools/.gobin $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	mv $(CURDIR)/bin/tools/.gobin/promtool $@

$(CONTROLLER_GEN):
	GOBIN=$(CURDIR)/bin/tools/.gobin $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(CURDIR)/bin/tools/.gobin/controller-gen $@

.PHONY: release
release: ## Build release VERSION into dist/VERSION without Docker: binaries and OCI image archives (linux/amd64, linux/arm64), kubectl-holdfast's krew archives and filled manifest, the packaged chart, an SPDX SBOM, SHA256SUMS; REGISTRY=<registry> also pushes the images
	$(GO) run ./hack/release -version $(VERSION) $(if $(REGISTRY),-registry $(REGISTRY))

.PHONY: images
images: ## Build the static, non-root image of every binary (build/Dockerfile; needs Docker: IMAGE_REPO, IMAGE_TAG, default VERSION)
	IMAGE_TAG="$${IMAGE_TAG:-$(VERSION)}" hack/images.sh

.PHONY: kind-demo
kind-demo: ## With Docker (~4 GiB free): a kind cluster, the images, the chart, a failover and a voter swap on kubeadm's static pods (kind-config/)
	kind-config/demo.sh

.PHONY: kind-down
kind-down: ## Delete the kind demo cluster
	kind-config/down.sh

.PHONY: chart-files
chart-files: ## Copy the webhook's and the scheduler's configuration into charts/holdfast/files
	cp webhook/config/validating-webhook-configuration.yaml charts/holdfast/files/
	@if [[ -f scheduler-plugin/config/scheduler-config.yaml ]]; then cp scheduler-plugin/config/scheduler-config.yaml charts/holdfast/files/; fi

.PHONY: docs
docs: ## Regenerate docs/reference.md from api/, the metric definitions and every binary's --help
	$(GO) run ./docs/gen
