#!/usr/bin/env bash
# Builds the real container runtime the node-plugin CRI tests run against,
# from its Go modules, into bin/cri/<versions>/: containerd, its runc shim and
# ctr (containerd v2.x), and runc (cgo, seccomp). Skips the build when that
# directory already holds them (cold: about 3 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

containerd_version=v2.4.2
runc_version=v1.5.3
out="bin/cri/containerd-${containerd_version}_runc-${runc_version}"
# bin/cri/current names the built versions for test/crihost.
link() { ln -sfn "$(basename "${out}")" bin/cri/current; }
if [[ -x "${out}/containerd" && -x "${out}/containerd-shim-runc-v2" && -x "${out}/ctr" && -x "${out}/runc" ]]; then
	link
	echo "cri-bin: ${out} already built"
	exit 0
fi

hack/install-node-deps.sh

mkdir -p bin/cri
tmp=$(mktemp -d bin/cri/.build.XXXXXX)
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
echo "cri-bin: building containerd ${containerd_version} and runc ${runc_version} into ${out}"
# go install pkg@version builds each with its own module graph, not ours.
GOBIN="$(pwd)/${tmp}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" -tags no_btrfs \
	"github.com/containerd/containerd/v2/cmd/containerd@${containerd_version}" \
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${containerd_version}" \
	"github.com/containerd/containerd/v2/cmd/ctr@${containerd_version}"
GOBIN="$(pwd)/${tmp}" CGO_ENABLED=1 go install -trimpath -ldflags "-s -w" -tags "seccomp urfave_cli_no_docs" \
	"github.com/opencontainers/runc@${runc_version}"
rm -rf "${out}"
mv "${tmp}" "${out}"
chmod 755 "${out}"
trap - EXIT
link
echo "cri-bin: built in $(($(date +%s) - start))s"
