#!/usr/bin/env bash
# Installs node-opcua's OPC UA server (test/opcuaserver), which nobody on this
# project wrote, and against which the OPC UA driver's secured session is
# tested (runtime/driver/opcua, TestOPCUAConnectsWithSecurity): Debian's
# nodejs and npm when node or npm is missing, then the npm packages that
# test/opcuaserver/package-lock.json pins, into test/opcuaserver/node_modules.
# Idempotent: installs again only when the lock file changed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=test/opcuaserver
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	hack/apt-install.sh opcua-deps nodejs npm
fi
stamp="${dir}/node_modules/.holdfast-package-lock.json"
if cmp -s "${dir}/package-lock.json" "${stamp}" 2>/dev/null; then
	echo "opcua-deps: ${dir}/node_modules matches its package-lock.json"
	exit 0
fi
echo "opcua-deps: installing ${dir}/package-lock.json's packages"
npm ci --prefix "${dir}" --no-audit --no-fund --loglevel=error
cp "${dir}/package-lock.json" "${stamp}"
