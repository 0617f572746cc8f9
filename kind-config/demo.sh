#!/usr/bin/env bash
# make kind-demo: a kind cluster (kind-config/cluster.yaml, or $KIND_CONFIG),
# holdfast's images built and loaded, the chart installed, and the failover
# and voter swap stories walked with kubectl holdfast. Needs Docker; kind and
# helm are built from their Go modules into bin/ (cached by version).
# make kind-down deletes the cluster. On a machine without Docker, make demo
# runs the same stories on a local cluster of real processes.
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_VERSION=${KIND_VERSION:-v0.33.0}
HELM_VERSION=${HELM_VERSION:-$(awk '$1 == "helm.sh/helm/v3" { print $2; exit }' go.mod)}
KIND_CONFIG=${KIND_CONFIG:-kind-config/cluster.yaml}
CLUSTER=${KIND_CLUSTER:-holdfast}
DOCKER=${DOCKER:-docker}
BIN=$PWD/bin
KIND=$BIN/tools/kind-$KIND_VERSION
HELM=$BIN/tools/helm-$HELM_VERSION
K8S_BIN=$BIN/k8s/$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)
KUBECTL=${KUBECTL:-$K8S_BIN/kubectl}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if ! command -v "$DOCKER" >/dev/null 2>&1 || ! "$DOCKER" info >/dev/null 2>&1; then
	echo "kind-demo: no Docker engine is reachable ('$DOCKER info' failed): kind runs its nodes as containers." >&2
	echo "kind-demo: run 'make demo' instead: the same stories on a local cluster of real processes, no Docker needed." >&2
	exit 1
fi

tool() { # tool PATH MODULE@VERSION
	if [[ ! -x "$1" ]]; then
		echo "kind-demo: building $2 into $1"
		GOBIN="$BIN/tools/.gobin" go install "$2"
		mv "$BIN/tools/.gobin/$(basename "${2%%@*}")" "$1"
	fi
}
mkdir -p "$BIN/tools"
tool "$KIND" "sigs.k8s.io/kind@$KIND_VERSION"
tool "$HELM" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
[[ -x "$KUBECTL" ]] || make k8s-bin
go build -o "$BIN/kubectl-holdfast" ./cmd/kubectl-holdfast
export PATH="$BIN:$PATH"

say "kind cluster $CLUSTER from $KIND_CONFIG"
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
	"$KIND" create cluster --name "$CLUSTER" --config "$KIND_CONFIG" --wait 5m
fi
export KUBECONFIG=${KUBECONFIG_OUT:-$BIN/kind-$CLUSTER.kubeconfig}
"$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
k() { "$KUBECTL" "$@"; }
node() { k get nodes -l "holdfast.io/demo-node=$1" -o jsonpath='{.items[0].metadata.name}'; }

say "images holdfast.local/*:dev, loaded into the nodes"
IMAGE_REPO=holdfast.local IMAGE_TAG=dev DOCKER="$DOCKER" hack/images.sh
for img in holdfast-controller holdfast-webhook holdfast-scheduler holdfast-node unit-runtime; do
	[[ -f "cmd/$img/main.go" ]] && "$KIND" load docker-image --name "$CLUSTER" "holdfast.local/$img:dev"
done

say "etcd role labels on the control-plane nodes (kubeadm's stacked etcd members)"
k label nodes -l node-role.kubernetes.io/control-plane node-role.kubernetes.io/etcd=true --overwrite

say "helm install holdfast"
"$HELM" upgrade --install holdfast charts/holdfast --namespace holdfast-system --create-namespace \
	--set image.repository=holdfast.local --set image.tag=dev --set image.pullPolicy=Never \
	--set node.memberDataParent= --wait --timeout 5m
k -n holdfast-system get deploy,ds

say "Failover story: kiln-1 (Failover) on edge-1, press-2 (Autonomy) on edge-2"
k apply -f kind-config/units.yaml
k -n plant wait unit/kiln-1 --for=jsonpath='{.status.runtimeBinding.leaseState}'=Held --timeout=3m
kubectl-holdfast status -n plant
say "The lease channel is mutual TLS: each runtime's certificate from the holdfast.io/lease signer, the CA in a ClusterTrustBundle"
k -n plant get podcertificaterequests -o custom-columns=POD:.spec.podName,SIGNER:.spec.signerName,ISSUED:.status.notBefore,EXPIRES:.status.notAfter
k get clustertrustbundle holdfast.io:lease:ca

EDGE1=$(node edge-1) STANDBY=$(node standby-1) EDGE2=$(node edge-2)
say "Cut edge-1 ($EDGE1) from the network: its runtime holds, then fences; holdfast re-binds kiln-1 to the standby"
"$DOCKER" network disconnect kind "$EDGE1"
k -n plant wait unit/kiln-1 --for=jsonpath='{.status.runtimeBinding.node}'="$STANDBY" --timeout=5m
k -n plant wait unit/kiln-1 --for=jsonpath='{.status.runtimeBinding.leaseState}'=Held --timeout=3m
kubectl-holdfast status -n plant
k -n plant get events --field-selector involvedObject.name=kiln-1 --sort-by=.lastTimestamp | tail -n 12
say "Resume kiln-1 on the standby (the Hold is cleared once its runtime is ready)"
kubectl-holdfast restart -n plant kiln-1 --wait --timeout 3m
"$DOCKER" network connect kind "$EDGE1"

say "press-2 is Autonomy: a failover without a confirmed fence is refused (exit 2), with one it is carried out"
if kubectl-holdfast failover -n plant press-2 --to "$STANDBY"; then echo "unexpected: accepted"; exit 1; else echo "exit $? as documented"; fi
"$DOCKER" pause "$EDGE2"
kubectl-holdfast failover -n plant press-2 --to "$STANDBY" --confirm-fenced "kind demo: node container paused" --wait --timeout 3m
"$DOCKER" unpause "$EDGE2"
kubectl-holdfast status -n plant

say "Voter swap story"
kubectl-holdfast status
CP=$(node cp-1)
echo "Would swapping $CP for $STANDBY pass every gate now? (a dry run: nothing is created)"
kubectl-holdfast swap "$CP" "$STANDBY" --dry-run --reason "kind demo" || echo "exit $?: refused, each reason above"
echo
echo "kind's control-plane nodes run kubeadm's stacked etcd as static pods, not the server/agent"
echo "systemd units holdfast-node switches, so the swap itself is shown by 'make demo'."
echo
echo "The cluster stays up: export KUBECONFIG=$KUBECONFIG; 'make kind-down' deletes it."
