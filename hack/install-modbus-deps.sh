#!/usr/bin/env bash
# Installs the Modbus TCP server and client nobody on this project wrote, which
# the unit runtime's Modbus driver is tested against (cmd/unit-runtime,
# TestTheRuntimeDrivesAModbusServerNobodyHereWrote): Debian's python3-pymodbus,
# and python3-serial-asyncio, which the package only recommends but whose
# modules its server imports. Idempotent: installs only what is missing.
set -euo pipefail

exec "$(dirname "$0")/apt-install.sh" modbus-deps python3-pymodbus python3-serial-asyncio
