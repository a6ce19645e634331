#!/usr/bin/env bash
# Stop a random collbench rank (kill -STOP: stuck, not dead) at a random
# moment of a running benchmark, TRIALS times, and check every trial:
#   - every other rank printed an error whose stall report names the stopped
#     rank as not responding ("stall report: rank V is not responding"),
#     within TIMEOUT + 2 x 2 s (the probe window, twice for a rank that
#     probes after a peer's abort notice) + 2 s of the stop;
#   - no error names any other rank as not responding, or as alive but idle;
#   - the launcher exits non-zero (it kills the stopped rank TIMEOUT after
#     the first rank failed) and no process of the trial is left.
# Prints one line per trial, with how long after the stop each rank printed
# its error and the launcher exited, and the counts at the end; exits 1 if
# any trial failed.
#
#   scripts/stall-trials.sh [TRIALS=15] [NP=4]
#   ALGOS="ring tree" TIMEOUT=5s ARGS="--transport tcp -b 1M -e 1M -n 100000" KEEP=dir scripts/stall-trials.sh 30
#   ALGOS="ring tree native" ARGS="--transport shm -b 1M -e 1M -n 100000" scripts/stall-trials.sh 15
# KEEP, when set, is a directory that gets every trial's stderr.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/trials.sh
. scripts/lib/trials.sh

TRIALS=${1:-15}
NP=${2:-4}
TIMEOUT=${TIMEOUT:-5s}
ALGOS=${ALGOS:-ring}
ARGS=${ARGS:---transport tcp -b 1M -e 1M -n 100000}
timeout_s=${TIMEOUT%s}
report_limit=$(awk -v t="$timeout_s" 'BEGIN { print t + 2 * 2 + 2 }')
launcher_limit=$(awk -v t="$timeout_s" 'BEGIN { print 2 * t + 2 * 2 + 5 }')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/collbench" ./cmd/collbench || exit 1
read -r -a algos <<<"$ALGOS"
read -r -a args <<<"$ARGS"

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }

pass=0 fail=0 missed=0 named=0 reports=0
for trial in $(seq 1 "$TRIALS"); do
  algo=${algos[$((RANDOM % ${#algos[@]}))]}
  mark="stalltrial-$$-$trial"
  out="$work/out.$trial" err="$work/err.$trial"
  COLLKIT_TRIAL_MARK=$mark "$work/collbench" --np "$NP" --algo "$algo" "${args[@]}" \
    --timeout "$TIMEOUT" >"$out" 2>"$err" &
  launcher=$!
  pick_victim "$out" '^# *size' 0.5 stop || continue
  stopped_at=$(now)
  kill -STOP "$victim_pid"
  # Note when each rank prints its error and when the launcher exits.
  declare -A printed=()
  ended=0
  while :; do
    for r in $(seq 0 $((NP - 1))); do
      [ -n "${printed[$r]:-}" ] && continue
      grep -q "^collbench: rank $r: " "$err" 2>/dev/null && printed[$r]=$(since "$stopped_at")
    done
    if ! kill -0 "$launcher" 2>/dev/null; then ended=1; break; fi
    if awk -v a="$(since "$stopped_at")" -v l="$launcher_limit" 'BEGIN { exit !(a > l) }'; then break; fi
    sleep 0.05
  done
  took=$(since "$stopped_at")
  problems=()
  if [ "$ended" = 0 ]; then
    problems+=("HANG: launcher still running ${took}s after the stop")
    kill -9 "$launcher" "$victim_pid" 2>/dev/null
  fi
  wait "$launcher"
  code=$?
  [ "$code" -ne 0 ] || problems+=("launcher exited 0")
  times=()
  for r in $(seq 0 $((NP - 1))); do
    [ "$r" = "$victim" ] && continue
    line=$(grep "^collbench: rank $r: " "$err" | head -1)
    if [ -z "$line" ]; then
      problems+=("rank $r printed no error")
      continue
    fi
    reports=$((reports + 1))
    times+=("rank $r ${printed[$r]:-?}s")
    if grep -q "stall report: rank $victim is not responding" <<<"$line"; then
      named=$((named + 1))
    else
      problems+=("rank $r's stall report does not name rank $victim as not responding: ${line:0:600}")
    fi
    others=$(grep -oE "rank [0-9]+ is (not responding|alive but in no send or receive)" <<<"$line" |
      grep -v "^rank $victim is not responding" | sort -u | tr '\n' ';')
    [ -z "$others" ] || problems+=("rank $r blames a live rank: $others")
    if [ -n "${printed[$r]:-}" ] && awk -v a="${printed[$r]}" -v l="$report_limit" 'BEGIN { exit !(a > l) }'; then
      problems+=("rank $r reported ${printed[$r]}s after the stop, later than TIMEOUT + 6 s")
    fi
  done
  unset printed
  [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$err" "$KEEP/trial-$trial.err"; }
  verdict "stopped rank $victim; every other rank named it (${times[*]}), launcher exit $code after ${took}s" "stopped rank $victim: FAILED after ${took}s (${times[*]})" 800
done
echo "stall trials: $pass passed, $fail failed, $missed not counted (run ended before the stop), of $TRIALS;" \
  "$named of $reports stall reports named the stopped rank"
[ "$fail" -eq 0 ]
