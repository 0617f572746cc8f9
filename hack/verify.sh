#!/usr/bin/env bash
# Fails when generated files are stale, when gofmt or go vet complain, or when
# go mod tidy would change go.mod or go.sum. Read-only: generation and tidying
# run on a copy of the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CONTROLLER_GEN:?set CONTROLLER_GEN (make verify does)}"

fail=0
files=$( { git ls-files; git ls-files --others --exclude-standard; } | sort -u | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)

unformatted=$(grep '\.go$' <<<"${files}" | xargs -r gofmt -l)
if [[ -n "${unformatted}" ]]; then
	echo "verify: not gofmt-formatted (run gofmt -w):" >&2
	echo "${unformatted}" >&2
	fail=1
fi

# A file past 700 lines holds more than one concern; split it by concern
# (generated files are exempt).
long=$(grep -E '\.(go|sh)$' <<<"${files}" | grep -v 'zz_generated' | xargs -r wc -l | awk '$2 != "total" && $1 > 700 {print $2 " (" $1 " lines)"}')
if [[ -n "${long}" ]]; then
	echo "verify: over 700 lines (split by concern):" >&2
	echo "${long}" >&2
	fail=1
fi

if ! go vet -tags integration ./...; then
	echo "verify: go vet found problems" >&2
	fail=1
fi

copy=$(mktemp -d)
trap 'rm -rf "${copy}"' EXIT
tar -cf - ${files} | tar -xf - -C "${copy}"

(cd "${copy}" && go mod tidy)
for f in go.mod go.sum; do
	if ! diff -u "${f}" "${copy}/${f}"; then
		echo "verify: go mod tidy changes ${f}; run go mod tidy and commit" >&2
		fail=1
	fi
done

(cd "${copy}" && make --no-print-directory generate CONTROLLER_GEN="${CONTROLLER_GEN}" >/dev/null)
for d in api charts/holdfast/files/crds scheduler-plugin/apis; do
	if ! diff -ru "${d}" "${copy}/${d}"; then
		echo "verify: generated files under ${d} are stale; run make generate and commit" >&2
		fail=1
	fi
done

exit "${fail}"
