#!/usr/bin/env bash
# Builds the container image of every holdfast binary under cmd/ with
# build/Dockerfile (static, non-root), tagged $IMAGE_REPO/<binary>:$IMAGE_TAG.
# Needs a Docker engine; without one it says so and fails (this project's own
# machines have none: the chart checks and the local demo need no images).
#   IMAGE_REPO (default ghcr.io/holdfast-io), IMAGE_TAG (default dev),
#   DOCKER (default docker), PLATFORMS (optional, e.g. linux/amd64,linux/arm64: uses buildx)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE_REPO=${IMAGE_REPO:-ghcr.io/holdfast-io}
IMAGE_TAG=${IMAGE_TAG:-dev}
DOCKER=${DOCKER:-docker}
# The images the chart and the demo run; kubectl-holdfast is a client, not an image.
IMAGES=(holdfast-controller holdfast-webhook holdfast-scheduler holdfast-node unit-runtime device-simulator)

if ! command -v "${DOCKER}" >/dev/null 2>&1; then
	echo "images: '${DOCKER}' not found: make images needs a Docker engine (install Docker, or set DOCKER=podman)." >&2
	echo "images: nothing was built. The chart checks (make test) and the local demo (make demo) need no images." >&2
	exit 1
fi
if ! "${DOCKER}" info >/dev/null 2>&1; then
	echo "images: '${DOCKER} info' failed: no Docker engine is reachable (is the daemon running, may this user use it?)." >&2
	echo "images: nothing was built." >&2
	exit 1
fi

built=()
for img in "${IMAGES[@]}"; do
	if [[ ! -f "cmd/${img}/main.go" ]]; then
		echo "images: cmd/${img} is not in the tree yet; skipping ${img}" >&2
		continue
	fi
	ref="${IMAGE_REPO}/${img}:${IMAGE_TAG}"
	echo "images: building ${ref}"
	if [[ -n "${PLATFORMS:-}" ]]; then
		"${DOCKER}" buildx build --platform "${PLATFORMS}" --build-arg "BINARY=${img}" --build-arg "VERSION=${IMAGE_TAG}" -f build/Dockerfile -t "${ref}" .
	else
		"${DOCKER}" build --build-arg "BINARY=${img}" --build-arg "VERSION=${IMAGE_TAG}" -f build/Dockerfile -t "${ref}" .
	fi
	built+=("${ref}")
done
printf 'images: built %s\n' "${built[@]}"
