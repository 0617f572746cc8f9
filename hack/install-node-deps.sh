#!/usr/bin/env bash
# Installs the Debian packages the node-plugin tests need on a fresh machine:
# dbus (dbus-daemon, for the private bus the systemd double is served on) and
# libseccomp-dev (runc is built with the seccomp tag), and iproute2 (ip: the
# e2e cluster's network namespaces and links, test/cluster), and nftables
# (nft: the e2e asymmetric-partition drill drops one direction inside a
# node's own network namespace). Idempotent:
# installs only what is missing.
set -euo pipefail

exec "$(dirname "$0")/apt-install.sh" node-deps dbus-daemon libseccomp-dev pkg-config iproute2 nftables
