#!/usr/bin/env bash
# The library's edges as a user meets them, with real processes: each case
# starts ranks the way torchrun does (RANK, WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT), then prints what every rank said and when it exited.
#
#   scripts/edges.sh            # every case
#   scripts/edges.sh missing    # one of: missing worldsize twojobs stuck shm
#
# The cases that need no separate processes (two goroutines on one Comm,
# mismatched counts and roots, float16, the README's code) are tests:
#   go test -run 'ConcurrentUseTrials|Mismatch|BadArguments' -v .
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/collbench" ./cmd/collbench
go build -o "$work/allreduce" ./examples/allreduce
port=$((30000 + RANDOM % 20000))

# start NAME RANK SIZE [ENV=VALUE...] -- PROGRAM ARGS...: one rank in the
# background; its output goes to $work/NAME, its exit status and time (s)
# to $work/NAME.exit.
start() {
  local name=$1 rank=$2 size=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  (
    t0=$(date +%s.%N)
    set +e
    env RANK="$rank" WORLD_SIZE="$size" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "${envs[@]}" "$@" >"$work/$name" 2>&1
    rc=$?
    echo "$rc $(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')" >"$work/$name.exit"
  ) &
}

# report NAME...: each rank's exit status, time and first error line.
report() {
  for name in "$@"; do
    read -r rc took <"$work/$name.exit" || { rc='?'; took='?'; }
    local line
    line=$(grep -m1 -E '^collbench: rank|^[0-9/: ]+collkit|^[0-9/: ]+rank [0-9]+:|rank [0-9]+ of [0-9]+:' "$work/$name" ||
      grep -m1 -iE 'error|WARN' "$work/$name" || true)
    echo "  $name: exit $rc after ${took}s: $(echo "$line" | cut -c1-600)"
  done
}

missing() {
  echo "== missing: ranks 0 and 2 of 3 start, rank 1 never does"
  echo "   library (examples/allreduce: FromEnv with context.Background(), default options), 35 s:"
  start lib0 0 3 -- "$work/allreduce"
  start lib2 2 3 -- "$work/allreduce"
  sleep 35
  for r in 0 2; do echo "  rank $r after 35 s: $(grep -m1 'still waiting' "$work/lib$r" | cut -c1-400)"; done
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  port=$((port + 1))
  echo "   collbench --connect-timeout 10s, COLLKIT_DEBUG=INFO:"
  start cb0 0 3 COLLKIT_DEBUG=INFO -- "$work/collbench" -b 8 -e 8 -n 1 --connect-timeout 10s
  start cb2 2 3 COLLKIT_DEBUG=INFO -- "$work/collbench" -b 8 -e 8 -n 1 --connect-timeout 10s
  wait
  grep -m2 'waiting for ranks' "$work/cb0" | cut -c1-300 | sed 's/^/  rank 0 log: /'
  report cb0 cb2
  port=$((port + 1))
}

worldsize() {
  echo "== worldsize: rank 0 with WORLD_SIZE=2, rank 1 with WORLD_SIZE=3"
  start ws0 0 2 -- "$work/collbench" -b 8 -e 8 -n 1
  start ws1 1 3 -- "$work/collbench" -b 8 -e 8 -n 1
  wait
  report ws0 ws1
  port=$((port + 1))
}

twojobs() {
  echo "== twojobs: jobs A and B, 2 ranks each, one MASTER_PORT, no secret, started together"
  for job in A B; do
    for r in 0 1; do start "job$job$r" "$r" 2 -- "$work/collbench" -b 8 -e 1M -n 20; done
  done
  wait
  report jobA0 jobA1 jobB0 jobB1
  echo "   jobs that passed: $(grep -l '0 OK' "$work"/job?? 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
  port=$((port + 1))
}

stuck() {
  echo "== stuck: 4 ranks, --timeout 10s, rank 2 SIGSTOPped 3 s in"
  for r in 0 1 2 3; do start "st$r" "$r" 4 -- "$work/collbench" -b 8 -e 1M --min-time 5s -q --timeout 10s; done
  sleep 3
  local pid
  pid=$(pgrep -f "$work/collbench -b 8 -e 1M --min-time 5s" | while read -r p; do
    grep -qz '^RANK=2$' "/proc/$p/environ" 2>/dev/null && echo "$p"; done | head -1 || true)
  kill -STOP "$pid"
  echo "  stopped rank 2 (pid $pid) at +3 s"
  for r in 0 1 3; do while [ ! -f "$work/st$r.exit" ]; do sleep 0.2; done; done
  kill -CONT "$pid"; kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  report st0 st1 st3
  port=$((port + 1))
}

shm() {
  echo "== shm: Options.Transport \"shm\" through FromEnv (collbench --transport shm, 3 ranks)"
  for r in 0 1 2; do start "sh$r" "$r" 3 -- "$work/collbench" --transport shm -b 8 -e 64K -n 5; done
  wait
  report sh0
  grep -E '^ +[0-9]+ ' "$work/sh0" | tail -2 | sed 's/^/  /'
  grep -m1 'Out of bounds' "$work/sh0" | sed 's/^/  /'
  port=$((port + 1))
}

cases=${1:-missing worldsize twojobs stuck shm}
for c in $cases; do "$c"; done
