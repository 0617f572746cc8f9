#!/usr/bin/env bash
# apt-install.sh LABEL PACKAGE...: installs the Debian packages that are
# missing, and nothing when every one is installed (the hack/install-*-deps.sh
# scripts name theirs and why).
set -euo pipefail

label=$1
shift
want=("$@")
missing=()
for p in "${want[@]}"; do
	if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("${p}")
	fi
done
if ((${#missing[@]} == 0)); then
	echo "${label}: ${want[*]} already installed"
	exit 0
fi
echo "${label}: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
