#!/usr/bin/env bash
# Builds the real Kubernetes the tests run against from this module's own
# graph, so the binaries match the libraries, into bin/k8s/<kubernetes
# version>/: kube-apiserver, kubectl and etcd (test/testenv), and the kubelet,
# kube-controller-manager and kube-scheduler of the e2e cluster
# (test/cluster). Skips the build when that directory already holds all six
# for the same versions (cold: about 8 minutes on 2 cores for the first
# three; the others add what docs/benchmarks.md "e2e" measured). A directory
# of the same versions that lacks some gets only those added beside the
# others, which are never rebuilt (other checkouts may be running them).
set -euo pipefail

cd "$(dirname "$0")/.."

k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
out="bin/k8s/${k8s_version}"
stamp="${out}/VERSIONS"
want="kubernetes=${k8s_version} etcd=${etcd_version}"
# The main package of each binary; etcd's is the module root, which go build
# names "server".
declare -A pkgs=(
	[kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
	[kubectl]=k8s.io/kubernetes/cmd/kubectl
	[kubelet]=k8s.io/kubernetes/cmd/kubelet
	[kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
	[kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
	[etcd]=go.etcd.io/etcd/server/v3
)

missing=()
for b in "${!pkgs[@]}"; do [[ -x "${out}/${b}" ]] || missing+=("${b}"); done
same=0
[[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]] && same=1
if ((same)) && ((${#missing[@]} == 0)); then
	echo "k8s-bin: ${out} already holds ${want}"
	exit 0
fi
if ! ((same)); then
	missing=("${!pkgs[@]}")
fi

# shellcheck source=lib/k8s-ldflags.sh
source hack/lib/k8s-ldflags.sh
ldflags=$(k8s_ldflags "${k8s_version}")

# Build into a scratch directory and move the binaries into place only when
# the build succeeded, so an interrupted build never leaves a directory that
# looks complete.
mkdir -p bin/k8s
tmp=$(mktemp -d bin/k8s/.build.XXXXXX)
trap 'rm -rf "${tmp}"' EXIT

echo "k8s-bin: building ${missing[*]} of ${want} into ${out}"
start=$(date +%s)
build=()
for b in "${missing[@]}"; do build+=("${pkgs[${b}]}"); done
# One go build for all shares the compilation of their common packages.
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${tmp}/" "${build[@]}"
if [[ -f "${tmp}/server" ]]; then
	mv "${tmp}/server" "${tmp}/etcd"
fi

if ((same)); then
	for b in "${missing[@]}"; do mv "${tmp}/${b}" "${out}/${b}"; done
else
	echo "${want}" >"${tmp}/VERSIONS"
	rm -rf "${out}"
	mv "${tmp}" "${out}"
	chmod 755 "${out}"
fi
trap - EXIT
rm -rf "${tmp}"
echo "k8s-bin: built in $(($(date +%s) - start))s"
"${out}/kubectl" version --client
"${out}/kubelet" --version
"${out}/kube-controller-manager" --version
"${out}/kube-scheduler" --version
