#!/usr/bin/env bash
# hack/chart-fixture.sh REF: packages charts/holdfast as of git REF with helm
# package into test/chart/testdata/holdfast-previous.tgz, the chart
# TestChartUpgradeFromThePreviousVersion upgrades from, and records REF's
# commit beside it. Run it at each release with the tag just released.
# helm is built from its Go module at go.mod's version into bin/tools (HELM
# overrides the path).
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: hack/chart-fixture.sh REF (the release tag, or a commit)}
commit=$(git rev-parse --verify "${ref}^{commit}")

HELM_VERSION=$(awk '$1 == "helm.sh/helm/v3" { print $2; exit }' go.mod)
HELM=${HELM:-$PWD/bin/tools/helm-$HELM_VERSION}
if [[ ! -x "$HELM" ]]; then
	mkdir -p "$(dirname "$HELM")/.gobin"
	GOBIN="$(dirname "$HELM")/.gobin" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	mv "$(dirname "$HELM")/.gobin/helm" "$HELM"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$commit" charts/holdfast | tar -x -C "$tmp"
"$HELM" package "$tmp/charts/holdfast" -d "$tmp/out" >/dev/null
mv "$tmp"/out/holdfast-*.tgz test/chart/testdata/holdfast-previous.tgz
echo "$commit" >test/chart/testdata/holdfast-previous.commit
echo "test/chart/testdata/holdfast-previous.tgz: charts/holdfast at $ref ($commit)"
