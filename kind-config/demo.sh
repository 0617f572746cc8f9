#!/usr/bin/env bash
# make kind-demo: a kind cluster (kind-config/cluster.yaml, or $KIND_CONFIG),
# holdfast's images built and loaded, the chart installed, and two stories
# walked with kubectl holdfast: a unit's failover, then a real etcd voter
# swap on kind's kubeadm control plane (a control-plane node's stacked etcd
# member and kube-apiserver handed to the voter-eligible worker standby-1).
# Needs Docker with about 4 GiB of free memory for the six nodes, and 15 to
# 20 minutes (the first run also builds kind, helm and the images); kind and
# helm are built from their Go modules into bin/ (cached by version).
# make kind-down deletes the cluster. On a machine without Docker, make demo
# runs the same stories on a local cluster of real processes.
# kind-config/config_test.go and swap_test.go check, without Docker, what
# this script relies on: the cluster config, the chart values, the
# VoterPolicy and the files written to the nodes (kind-config/swap-lib.sh).
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

say "helm install holdfast (kind-config/values.yaml: the images just loaded; voter swaps come with the swap story)"
"$HELM" upgrade --install holdfast charts/holdfast --namespace holdfast-system --create-namespace \
	-f kind-config/values.yaml --wait --timeout 5m
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

say "Voter swap story: etcd voters and the nodes holdfast may make voters"
# shellcheck source=kind-config/swap-lib.sh
source kind-config/swap-lib.sh
ip_of() { k get node "$1" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}'; }
read -r -a CPS <<<"$(k get nodes -l node-role.kubernetes.io/control-plane -o jsonpath='{.items[*].metadata.name}')"
CP=$(node cp-1) WITNESS=
for n in "${CPS[@]}"; do [[ $n == "$CP" ]] || WITNESS=$n; done
k get nodes -L node-role.kubernetes.io/etcd,holdfast.io/voter-eligible
if ((${#CPS[@]} < 3)); then
	echo "Would swapping $CP for $STANDBY pass every gate now? (a dry run: nothing is created)"
	kubectl-holdfast swap "$CP" "$STANDBY" --dry-run --reason "kind demo" || echo "exit $?: refused, each reason above"
	echo
	echo "${#CPS[@]} control-plane node(s): a swap needs kind-config/cluster.yaml's three (one voter cannot be"
	echo "replaced without losing quorum). 'make demo' shows one on a local cluster of real processes."
	echo "The cluster stays up: export KUBECONFIG=$KUBECONFIG; 'make kind-down' deletes it."
	exit 0
fi
etcd_members() { # etcd's own member list, read in the etcd pod of a member the swap keeps
	k -n kube-system exec "etcd-$WITNESS" -- etcdctl --endpoints=https://127.0.0.1:2379 --cacert="$KUBEADM_PKI/etcd/ca.crt" \
		--cert="$KUBEADM_PKI/etcd/healthcheck-client.crt" --key="$KUBEADM_PKI/etcd/healthcheck-client.key" member list -w table
}
copy_file() { # copy_file FROM_NODE TO_NODE PATH MODE: one file between node containers, replaced whole
	# shellcheck disable=SC2016 # expanded by the node's shell
	"$DOCKER" exec "$1" cat "$3" | "$DOCKER" exec -i "$2" sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1.new" && chmod "$2" "$1.new" && mv "$1.new" "$1"' sh "$3" "$4"
}
pki_mode() { [[ $1 == *.key ]] && echo 600 || echo 644; }
etcd_members

say "kiln-1 and press-2 now run on $STANDBY: a swap waits for its incoming node's unit runtimes (a planned change never cuts a job), so the failover story's units go first"
k delete -f kind-config/units.yaml --ignore-not-found --wait --timeout=3m

CP_IP=$(ip_of "$CP") STANDBY_IP=$(ip_of "$STANDBY")
CLUSTER_CONFIG=$(k -n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}')
CP_ENDPOINT=$(control_plane_endpoint <<<"$CLUSTER_CONFIG")
say "Provision $STANDBY ($STANDBY_IP) as 'kubeadm join --control-plane' would, without starting anything: the shared PKI from $CP, its own apiserver certificates, the kube-apiserver template"
for f in "${SHARED_PKI[@]}"; do
	copy_file "$CP" "$STANDBY" "$KUBEADM_PKI/$f" "$(pki_mode "$f")"
done
kubeadm_certs_config "$STANDBY" "$STANDBY_IP" <<<"$CLUSTER_CONFIG" | "$DOCKER" exec -i "$STANDBY" sh -c 'cat >/kind/holdfast-certs.yaml'
for c in "${APISERVER_CERTS[@]}"; do
	"$DOCKER" exec "$STANDBY" kubeadm init phase certs "$c" --config /kind/holdfast-certs.yaml
done
echo "The template is $CP's kube-apiserver.yaml with $CP_IP replaced by $STANDBY_IP (advertise address, probes); the actuator copies it as it is."
# shellcheck disable=SC2016 # expanded by the node's shell
"$DOCKER" exec "$CP" cat "$KUBEADM_MANIFESTS/kube-apiserver.yaml" | apiserver_template "$CP_IP" "$STANDBY_IP" |
	"$DOCKER" exec -i "$STANDBY" sh -c 'mkdir -p "$(dirname "$1")" "$2" && cat >"$1"' sh "$APISERVER_TEMPLATE" "$KUBEADM_MANIFESTS"
"$DOCKER" exec "$STANDBY" grep -e --advertise-address -e 'host:' "$APISERVER_TEMPLATE"

say "holdfast-node reads etcd with kubeadm's health-check client (values-swap.yaml node.etcd), which kubeadm puts on control-plane nodes only: copied to each worker"
for n in $(k get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[*].metadata.name}'); do
	for f in "${ETCD_CLIENT_PKI[@]}"; do
		copy_file "$CP" "$n" "$KUBEADM_PKI/$f" "$(pki_mode "$f")"
	done
done

say "kubeadm points each control-plane kubelet at its own kube-apiserver; a stepped-down node's kubelet must still reach one (it deletes the mirror pods the swap waits for): at $CP_ENDPOINT, kind's load balancer"
for n in "${CPS[@]}"; do
	conf=$("$DOCKER" exec "$n" cat /etc/kubernetes/kubelet.conf)
	if [[ $(kubelet_conf_at "$CP_ENDPOINT" <<<"$conf") != "$conf" ]]; then
		kubelet_conf_at "$CP_ENDPOINT" <<<"$conf" | "$DOCKER" exec -i "$n" sh -c 'umask 077 && cat >/etc/kubernetes/kubelet.conf.new && mv /etc/kubernetes/kubelet.conf.new /etc/kubernetes/kubelet.conf'
		"$DOCKER" exec "$n" systemctl restart kubelet
	fi
done
k wait nodes --all --for=condition=Ready --timeout=3m

say "The voters role reaches etcd with kubeadm's apiserver-etcd-client certificate: Secret holdfast-system/holdfast-etcd-client"
ETCD_TLS=$(mktemp -d)
trap 'rm -rf "$ETCD_TLS"' EXIT
"$DOCKER" exec "$CP" cat "$KUBEADM_PKI/apiserver-etcd-client.crt" >"$ETCD_TLS/tls.crt"
"$DOCKER" exec "$CP" cat "$KUBEADM_PKI/apiserver-etcd-client.key" >"$ETCD_TLS/tls.key"
"$DOCKER" exec "$CP" cat "$KUBEADM_PKI/etcd/ca.crt" >"$ETCD_TLS/ca.crt"
k -n holdfast-system create secret generic holdfast-etcd-client --from-file="$ETCD_TLS/tls.crt" --from-file="$ETCD_TLS/tls.key" \
	--from-file="$ETCD_TLS/ca.crt" --dry-run=client -o yaml | k apply -f -
rm -rf "$ETCD_TLS"

ENDPOINTS=$(for n in "${CPS[@]}"; do printf 'https://%s:2379,' "$(ip_of "$n")"; done)
ETCD_IMAGE=$(k -n kube-system get pod "etcd-$CP" -o jsonpath='{.spec.containers[0].image}')
say "VoterPolicy default (kind-config/voterpolicy.yaml): the StaticPod actuator at kubeadm's paths, etcd at ${ENDPOINTS%,}, $ETCD_IMAGE"
voter_policy "${ENDPOINTS%,}" "$ETCD_IMAGE" "${#CPS[@]}" | k apply -f -

say "helm upgrade with kind-config/values-swap.yaml: voter swaps on, holdfast-node with the StaticPod actuator and kubeadm's directories"
"$HELM" upgrade holdfast charts/holdfast --namespace holdfast-system -f kind-config/values.yaml -f kind-config/values-swap.yaml --wait --timeout 5m
k -n holdfast-system get deploy,statefulset,ds
k wait voterpolicy/default --for=condition=EtcdHealthy --timeout=3m
k wait node "$STANDBY" --for=jsonpath='{.metadata.annotations.holdfast\.io/provisioned}'=true --timeout=3m

say "Before: ${#CPS[@]} voters on the control-plane nodes; $STANDBY is eligible and provisioned"
kubectl-holdfast status
etcd_members
echo "Would swapping $CP for $STANDBY pass every gate now? (a dry run: nothing is created)"
kubectl-holdfast swap "$CP" "$STANDBY" --dry-run --reason "kind demo"

say "Swap $CP out for $STANDBY: snapshot, $STANDBY cordoned and drained, added as a learner, its etcd and kube-apiserver written as static pods, promoted; $CP steps down and is removed"
kubectl-holdfast swap "$CP" "$STANDBY" --reason "kind demo" --wait --timeout 20m
k get voterswaps -o wide

say "After: $STANDBY votes and serves the API; $CP is a worker"
kubectl-holdfast status
etcd_members
k -n kube-system get pods -l tier=control-plane -o wide
k get nodes -L node-role.kubernetes.io/etcd,holdfast.io/voter-eligible

say "kubeadm's kube-controller-manager and kube-scheduler on $CP reached its own kube-apiserver: holdfast moves etcd and the apiserver only, so they go too (the other control-plane nodes run theirs)"
"$DOCKER" exec "$CP" rm -f "$KUBEADM_MANIFESTS/kube-controller-manager.yaml" "$KUBEADM_MANIFESTS/kube-scheduler.yaml"

echo
echo "The cluster stays up: export KUBECONFIG=$KUBECONFIG; 'make kind-down' deletes it."
