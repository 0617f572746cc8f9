#!/usr/bin/env bash
# Builds the real Kubernetes the tests run against from this module's own
# graph, so the binaries match the libraries, into bin/k8s/<kubernetes
# version>/: kube-apiserver, kubectl and etcd (test/testenv), and the kubelet
# of the e2e cluster's real nodes (test/cluster). Skips the build when that
# directory already holds all four for the same versions (cold: about 8
# minutes on 2 cores for the first three; the kubelet adds what
# /work/wt/notes/issue-10.md measured, see docs/benchmarks.md "e2e").
set -euo pipefail

cd "$(dirname "$0")/.."

k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
out="bin/k8s/${k8s_version}"
stamp="${out}/VERSIONS"
want="kubernetes=${k8s_version} etcd=${etcd_version}"
bins=(kube-apiserver kubectl etcd kubelet)

have=1
for b in "${bins[@]}"; do [[ -x "${out}/${b}" ]] || have=0; done
if ((have)) && [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
	echo "k8s-bin: ${out} already holds ${want}"
	exit 0
fi

# shellcheck source=lib/k8s-ldflags.sh
source hack/lib/k8s-ldflags.sh
ldflags=$(k8s_ldflags "${k8s_version}")

# Build into a scratch directory and move it into place whole, so an
# interrupted build never leaves a directory that looks complete.
mkdir -p bin/k8s
tmp=$(mktemp -d bin/k8s/.build.XXXXXX)
trap 'rm -rf "${tmp}"' EXIT

echo "k8s-bin: building ${want} into ${out}"
start=$(date +%s)
# One go build for all four shares the compilation of their common packages.
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${tmp}/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kubectl \
	k8s.io/kubernetes/cmd/kubelet \
	go.etcd.io/etcd/server/v3
# The etcd main package is the module root go.etcd.io/etcd/server/v3, which go
# build names "server".
mv "${tmp}/server" "${tmp}/etcd"
echo "${want}" >"${tmp}/VERSIONS"

rm -rf "${out}"
mv "${tmp}" "${out}"
chmod 755 "${out}"
trap - EXIT
echo "k8s-bin: built in $(($(date +%s) - start))s"
"${out}/kubectl" version --client
"${out}/kubelet" --version
