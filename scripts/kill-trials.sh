#!/usr/bin/env bash
# Kill a random collbench rank (kill -9) at a random moment of a running
# benchmark, TRIALS times, and check every trial:
#   - the launcher exits non-zero within TIMEOUT + 5 s of the kill (no hang);
#   - every surviving rank printed an error naming the dead rank;
#   - every surviving rank printed a stall report;
#   - no process of the trial is left afterwards.
# Prints one line per trial and the counts at the end; exits 1 if any
# trial failed.
#
#   scripts/kill-trials.sh [TRIALS=50] [NP=4]
#   ALGOS="ring halvingdoubling hierarchical tree" TIMEOUT=10s scripts/kill-trials.sh 50
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/trials.sh
. scripts/lib/trials.sh

TRIALS=${1:-50}
NP=${2:-4}
TIMEOUT=${TIMEOUT:-10s}
ALGOS=${ALGOS:-ring halvingdoubling hierarchical tree}
timeout_s=${TIMEOUT%s}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/collbench" ./cmd/collbench || exit 1
read -r -a algos <<<"$ALGOS"

pass=0 fail=0 missed=0
for trial in $(seq 1 "$TRIALS"); do
  algo=${algos[$((RANDOM % ${#algos[@]}))]}
  mark="killtrial-$$-$trial"
  out="$work/out.$trial" err="$work/err.$trial"
  # Long enough that the kill lands mid-run: many sizes, many iterations.
  COLLKIT_TRIAL_MARK=$mark "$work/collbench" --np "$NP" --algo "$algo" --nodes 2 \
    -b 4K -e 4M -f 2 -n 200 -w 2 --timeout "$TIMEOUT" >"$out" 2>"$err" &
  launcher=$!
  pick_victim "$out" '^ *[0-9]' 0 kill || continue
  killed_at=$(date +%s.%N)
  kill -9 "$victim_pid"
  # Bounded wait for the launcher.
  limit=$(awk -v t="$timeout_s" 'BEGIN { print t + 5 }')
  ended=0
  while :; do
    if ! kill -0 "$launcher" 2>/dev/null; then ended=1; break; fi
    if awk -v a="$(date +%s.%N)" -v b="$killed_at" -v l="$limit" 'BEGIN { exit !(a - b > l) }'; then break; fi
    sleep 0.05
  done
  took=$(awk -v a="$(date +%s.%N)" -v b="$killed_at" 'BEGIN { printf "%.2f", a - b }')
  problems=()
  if [ "$ended" = 0 ]; then
    problems+=("HANG: launcher still running ${took}s after the kill")
    kill -9 "$launcher" 2>/dev/null
  fi
  wait "$launcher"
  code=$?
  [ "$code" -ne 0 ] || problems+=("launcher exited 0")
  for r in $(seq 0 $((NP - 1))); do
    [ "$r" = "$victim" ] && continue
    line=$(grep "^collbench: rank $r: " "$err" | head -1)
    if [ -z "$line" ]; then
      problems+=("rank $r printed no error")
      continue
    fi
    grep -q -e "rank $victim died" -e "dead: rank $victim\b" -e "dead: .*rank $victim\b" <<<"$line" ||
      problems+=("rank $r does not name rank $victim: ${line:0:400}")
    grep -q "stall report" <<<"$line" || problems+=("rank $r printed no stall report")
  done
  verdict "killed rank $victim; all survivors failed naming it, launcher exit $code after ${took}s" "killed rank $victim: FAILED after ${took}s" 600
done
echo "kill trials: $pass passed, $fail failed, $missed not counted (run ended before the kill), of $TRIALS"
[ "$fail" -eq 0 ]
