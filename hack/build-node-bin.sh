#!/usr/bin/env bash
# Builds what a real node of the e2e cluster (test/cluster) runs beside
# containerd and runc (make cri-bin), and the controllers a real cluster has
# beside the apiserver: the kubelet, kube-controller-manager and
# kube-scheduler (the default scheduler) from this module's own graph, stamped like a release
# (bin/node/<kubernetes version>/), and the CNI plugins a node's network
# config names (bin/cni/<version>/). Each is skipped when already built for
# the same versions. Cold, on 2 cores: about 7 minutes of CPU for the three
# (less after make k8s-bin, which shares most packages), under a minute for
# the CNI plugins.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib/k8s-ldflags.sh
source hack/lib/k8s-ldflags.sh

k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
out="bin/node/${k8s_version}"
want="kubernetes=${k8s_version}"
if [[ -x "${out}/kubelet" && -x "${out}/kube-controller-manager" && -x "${out}/kube-scheduler" && -f "${out}/VERSIONS" ]] &&
	[[ "$(cat "${out}/VERSIONS")" == "${want}" ]]; then
	echo "node-bin: ${out} already holds ${want}"
else
	mkdir -p bin/node
	tmp=$(mktemp -d bin/node/.build.XXXXXX)
	trap 'rm -rf "${tmp}"' EXIT
	echo "node-bin: building the kubelet, kube-controller-manager and kube-scheduler ${k8s_version} into ${out}"
	start=$(date +%s)
	CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags "${k8s_version}")" -o "${tmp}/" \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler
	echo "${want}" >"${tmp}/VERSIONS"
	rm -rf "${out}"
	mv "${tmp}" "${out}"
	chmod 755 "${out}"
	trap - EXIT
	echo "node-bin: built in $(($(date +%s) - start))s"
	"${out}/kubelet" --version
fi

# The CNI plugins build with their own module graph (go install pkg@version).
cni_version=v1.10.0
cni_out="bin/cni/${cni_version}"
plugins=(bridge host-local loopback)
have=1
for p in "${plugins[@]}"; do [[ -x "${cni_out}/${p}" ]] || have=0; done
if ((have)); then
	echo "node-bin: ${cni_out} already holds the CNI plugins"
	exit 0
fi
mkdir -p bin/cni
tmp=$(mktemp -d bin/cni/.build.XXXXXX)
trap 'rm -rf "${tmp}"' EXIT
pkgs=()
for p in bridge loopback; do pkgs+=("github.com/containernetworking/plugins/plugins/main/${p}@${cni_version}"); done
pkgs+=("github.com/containernetworking/plugins/plugins/ipam/host-local@${cni_version}")
echo "node-bin: building the CNI plugins ${cni_version} into ${cni_out}"
GOBIN="$(pwd)/${tmp}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "${pkgs[@]}"
rm -rf "${cni_out}"
mv "${tmp}" "${cni_out}"
chmod 755 "${cni_out}"
trap - EXIT
echo "node-bin: CNI plugins built"
