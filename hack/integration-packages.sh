#!/usr/bin/env bash
# Prints the packages that hold tests built with the integration tag (tests
# against the real control plane), one per line, for go test.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' -E '^//go:build .*\bintegration\b' . |
	xargs -r -n1 dirname | sort -u | sed 's|^\./|./|'
