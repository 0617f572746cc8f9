#!/usr/bin/env bash
# Builds the CNI plugins the e2e cluster's nodes name in their network config
# (test/cluster) into bin/cni/<version>/, each with its own module graph
# (go install pkg@version). The runtime pods use the host network; the
# config (and so these plugins) is what makes a node's runtime report its
# network ready. Skipped when built; cold about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

cni_version=v1.10.0
out="bin/cni/${cni_version}"
plugins=(bridge host-local loopback)
have=1
for p in "${plugins[@]}"; do [[ -x "${out}/${p}" ]] || have=0; done
if ((have)); then
	echo "cni-bin: ${out} already holds the CNI plugins"
	exit 0
fi
mkdir -p bin/cni
tmp=$(mktemp -d bin/cni/.build.XXXXXX)
trap 'rm -rf "${tmp}"' EXIT
pkgs=()
for p in bridge loopback; do pkgs+=("github.com/containernetworking/plugins/plugins/main/${p}@${cni_version}"); done
pkgs+=("github.com/containernetworking/plugins/plugins/ipam/host-local@${cni_version}")
echo "cni-bin: building the CNI plugins ${cni_version} into ${out}"
start=$(date +%s)
GOBIN="$(pwd)/${tmp}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "${pkgs[@]}"
rm -rf "${out}"
mv "${tmp}" "${out}"
chmod 755 "${out}"
trap - EXIT
echo "cni-bin: built in $(($(date +%s) - start))s"
