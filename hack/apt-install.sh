#!/usr/bin/env bash
# apt-install.sh LABEL PACKAGE...: installs the Debian packages that are
# missing, and nothing when every one is installed (the hack/install-*-deps.sh
# scripts name theirs and why). Installs run one at a time on a machine (two
# clones' make test at once would otherwise fail on apt's lock), and wait
# for an apt that something else runs.
set -euo pipefail

label=$1
shift
want=("$@")
missing=()
find_missing() {
	missing=()
	for p in "${want[@]}"; do
		if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("${p}")
		fi
	done
}
find_missing
if ((${#missing[@]} == 0)); then
	echo "${label}: ${want[*]} already installed"
	exit 0
fi
exec 9>"${TMPDIR:-/tmp}/holdfast-apt-install.lock"
flock 9
find_missing
if ((${#missing[@]} == 0)); then
	echo "${label}: ${want[*]} installed meanwhile"
	exit 0
fi
echo "${label}: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
