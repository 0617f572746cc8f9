#!/usr/bin/env bash
# Installs the Modbus TCP server and client nobody on this project wrote, which
# the unit runtime's Modbus driver is tested against (cmd/unit-runtime,
# TestTheRuntimeDrivesAModbusServerNobodyHereWrote): Debian's python3-pymodbus,
# and python3-serial-asyncio, which the package only recommends but whose
# modules its server imports. Idempotent: installs only what is missing.
set -euo pipefail

want=(python3-pymodbus python3-serial-asyncio)
missing=()
for p in "${want[@]}"; do
	if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("${p}")
	fi
done
if ((${#missing[@]} == 0)); then
	echo "modbus-deps: ${want[*]} already installed"
	exit 0
fi
echo "modbus-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
