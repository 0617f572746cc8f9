#!/usr/bin/env bash
# Installs the Debian packages the node-plugin tests need on a fresh machine:
# dbus (dbus-daemon, for the private bus the systemd double is served on) and
# libseccomp-dev (runc is built with the seccomp tag), and iproute2 (ip: the
# e2e cluster's network namespaces and links, test/cluster), and nftables
# (nft: the e2e asymmetric-partition drill drops one direction inside a
# node's own network namespace). Idempotent:
# installs only what is missing.
set -euo pipefail

want=(dbus-daemon libseccomp-dev pkg-config iproute2 nftables)
missing=()
for p in "${want[@]}"; do
	if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("${p}")
	fi
done
if ((${#missing[@]} == 0)); then
	echo "node-deps: ${want[*]} already installed"
	exit 0
fi
echo "node-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
