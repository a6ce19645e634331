#!/usr/bin/env bash
# Seeded fault-injection trials of elastic communicators (issue 19) over the
# in-memory transport: every algorithm, a rank killed at a random step, and
# in a third of the trials a second rank killed during the shrink. Each
# trial checks that the survivors agree on the members, that every element
# after the shrink is exact, that nothing hangs; the run checks that no
# goroutine is left behind. CI runs 12 trials; this runs many.
#
# Usage: scripts/elastic-trials.sh [TRIALS] [SEED]   (default 500, a new seed)
# RACE=1 runs them under the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-500}
seed=${2:-$(date +%s%N)}
race=()
[ -z "${RACE:-}" ] || race=(-race)
log=$(mktemp /tmp/elastic-trials.XXXXXX.log)
start=$(date +%s)
status=0
COLLKIT_ELASTIC_TRIALS=$trials COLLKIT_ELASTIC_SEED=$seed \
  go test "${race[@]}" -count=1 -timeout 60m -run '^TestElasticTrials$' -v . >"$log" 2>&1 || status=$?
took=$(($(date +%s) - start))
grep -E 'trial [0-9]+ \{' "$log" || true # the failed ones, with their spec
doubles=$(grep -cE 'second [0-9]+ after' "$log" || true)
slowest=$(grep -oE 'after [^:]*: [0-9.]+(ms|s|µs)$' "$log" | awk '{print $NF}' | sort -h | tail -1)
echo "seed $seed: $(grep -oE '[0-9]+ trials, [0-9]+ failed' "$log" || echo 'no summary (see the log)'); $doubles with a second kill during the shrink; slowest trial $slowest; $took s; leak check: $(grep -q 'found unexpected goroutines' "$log" && echo 'LEAKED goroutines' || echo 'no goroutine left')"
echo "log: $log"
exit $status
