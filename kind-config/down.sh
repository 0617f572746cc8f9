#!/usr/bin/env bash
# make kind-down: deletes the kind demo cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
KIND_VERSION=${KIND_VERSION:-v0.33.0}
KIND=$PWD/bin/tools/kind-$KIND_VERSION
CLUSTER=${KIND_CLUSTER:-holdfast}
if [[ ! -x "$KIND" ]]; then
	echo "kind-down: $KIND is not built: there is no kind demo cluster to delete (make kind-demo builds it)." >&2
	exit 1
fi
"$KIND" delete cluster --name "$CLUSTER"
rm -f "bin/kind-$CLUSTER.kubeconfig"
