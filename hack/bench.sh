#!/usr/bin/env bash
# Runs every component benchmark that is not an e2e one (make bench-e2e has
# those), each with the command docs/benchmarks.md quotes for it. Timing goals
# are measured here, never asserted in make test. BENCH_ONLY=<regexp> runs
# only the lines whose command matches it, e.g. BENCH_ONLY=RenewalSkew.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
only=${BENCH_ONLY:-.}

benches=(
	"-run ^$ -bench . -benchtime 2s ./runtime/lease/ ./runtime/"
	"-run ^$ -bench RenewalSkew -benchtime 2x -timeout 30m ./controller/grantor/"
	"-run ^$ -bench WarmStart -benchtime 30x ./controller/units/"
	"-tags integration -run ^$ -bench GrantorLeaderLoss -benchtime 20x -timeout 60m ./controller/integration/"
	"-tags integration -run ^$ -bench Fence -benchtime 20x -timeout 30m ./node-plugin/"
	"-tags integration -run ^$ -bench AdmissionLatency -benchtime 3000x ./webhook/"
	"-run ^$ -bench Handler ./webhook/"
	"-tags integration -run ^$ -bench SchedulingThroughput -benchtime 4x -timeout 30m ./scheduler-plugin/integration/"
	"-run ^$ -bench . -benchtime 200x ./scheduler-plugin/unitplacement/"
	"-tags integration -run ^$ -bench VoterSwap100MB -benchtime 1x -timeout 30m ./controller/voters/"
)
echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for b in "${benches[@]}"; do
	if [[ ! "$b" =~ $only ]]; then
		continue
	fi
	echo "+ go test $b"
	# shellcheck disable=SC2086 # the line is the argument list
	$GO test $b
done
