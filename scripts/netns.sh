#!/usr/bin/env bash
# Simulated multi-host runs: HOSTS Linux network namespaces ("hosts") joined
# by veth pairs to a bridge in a switch namespace, each host's link
# optionally rate-limited with tc tbf, and RANKS_PER_HOST real collbench
# ranks per host started through the environment bootstrap (RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT, COLLKIT_NODE, COLLKIT_SECRET).
# Ranks on one host talk over that host's own stack; ranks on different
# hosts cross the (slow) links. Needs root and iproute2.
#
#   scripts/netns.sh compare   # ring vs hierarchical over slow links
#   scripts/netns.sh linkdown  # a host's link goes down mid-run: errors, not hangs
#   scripts/netns.sh overlap   # examples/dataparallel: blocking vs overlapped
#                              # gradient all-reduces over the slow links
#   scripts/netns.sh all       # both (default)
#   scripts/netns.sh down      # remove the namespaces
#
# Settings (environment): HOSTS=2 (2-4), RANKS_PER_HOST=2, RATE=200mbit
# (empty: no limit), SIZE=4M, ITERS=3, ALGOS=ring,hierarchical, TIMEOUT=5s,
# DOWN_AFTER=1.5 (seconds into the linkdown run), OVERLAP_ARGS (the
# dataparallel flags; default -layers 16 -params 262144 -work 8 -steps 10), COLLBENCH (a built binary;
# default: build one), JSON (where compare writes collbench's JSON).
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-2}
RANKS_PER_HOST=${RANKS_PER_HOST:-2}
RATE=${RATE-200mbit}
SIZE=${SIZE:-4M}
ITERS=${ITERS:-3}
ALGOS=${ALGOS:-ring,hierarchical}
TIMEOUT=${TIMEOUT:-5s}
DOWN_AFTER=${DOWN_AFTER:-1.5}
OVERLAP_ARGS=${OVERLAP_ARGS:--layers 16 -params 262144 -work 8 -steps 10}
PREFIX=${PREFIX:-ck$$}
SUBNET=10.77.$((RANDOM % 200 + 20))
PORT=29555
NP=$((HOSTS * RANKS_PER_HOST))

die() { echo "netns.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
command -v ip >/dev/null || die "needs iproute2 (apt-get install -y iproute2)"
[ "$HOSTS" -ge 2 ] && [ "$HOSTS" -le 4 ] || die "HOSTS=$HOSTS: use 2 to 4"

sw="${PREFIX}-sw"
host() { echo "${PREFIX}-h$1"; }
addr() { echo "$SUBNET.$(($1 + 1))"; }

down() {
  for h in $(seq 0 $((HOSTS - 1))); do ip netns del "$(host "$h")" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
}

up() {
  down
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for h in $(seq 0 $((HOSTS - 1))); do
    local ns; ns=$(host "$h")
    ip netns add "$ns"
    ip link add "${PREFIX}e$h" netns "$ns" type veth peer name "${PREFIX}s$h" netns "$sw"
    ip -n "$ns" link set "${PREFIX}e$h" name eth0
    ip -n "$ns" addr add "$(addr "$h")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$sw" link set "${PREFIX}s$h" master br0
    ip -n "$sw" link set "${PREFIX}s$h" up
    if [ -n "$RATE" ]; then
      # Both directions of the host's link: its egress and the switch port's.
      tc -n "$ns" qdisc add dev eth0 root tbf rate "$RATE" burst 64kb latency 50ms
      tc -n "$sw" qdisc add dev "${PREFIX}s$h" root tbf rate "$RATE" burst 64kb latency 50ms
    fi
  done
  echo "# $HOSTS hosts ($(addr 0) ... $(addr $((HOSTS - 1)))), $RANKS_PER_HOST ranks each, links ${RATE:-unlimited}"
}

# run ARGS...: starts every rank (of $PROG, default collbench) in its host's namespace, waits for all,
# and returns the number of ranks that failed. Rank 0's stdout goes to
# $work/out, every rank's stderr to $work/err.<rank>.
run() {
  local secret job pids=()
  secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  job="netns-$$-$RANDOM"
  for r in $(seq 0 $((NP - 1))); do
    local h=$((r / RANKS_PER_HOST))
    ip netns exec "$(host "$h")" env -i PATH="$PATH" HOME="${HOME:-/root}" \
      RANK="$r" WORLD_SIZE="$NP" LOCAL_RANK=$((r % RANKS_PER_HOST)) LOCAL_WORLD_SIZE="$RANKS_PER_HOST" \
      MASTER_ADDR="$(addr 0)" MASTER_PORT="$PORT" COLLKIT_NODE="host$h" \
      COLLKIT_SECRET="$secret" COLLKIT_JOB_ID="$job" \
      "${PROG:-$COLLBENCH}" "$@" >"$work/out.$r" 2>"$work/err.$r" &
    pids+=($!)
  done
  echo "${pids[*]}" >"$work/pids"
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  cp "$work/out.0" "$work/out"
  return "$failed"
}

compare() {
  local json=${JSON:-$work/compare.json}
  echo "# compare: $NP ranks, --algo $ALGOS, $SIZE, links ${RATE:-unlimited}"
  if ! run --algo "$ALGOS" --size "$SIZE" -n "$ITERS" -w 1 --timeout 120s --json "$json"; then
    cat "$work"/err.* >&2
    die "compare run failed"
  fi
  cat "$work/out"
}

linkdown() {
  echo "# linkdown: $NP ranks running ring all-reduces; host 1's link goes down after ${DOWN_AFTER}s; timeout $TIMEOUT"
  local start
  start=$(date +%s.%N)
  run --algo ring -b 64K -e 64M -f 2 -n 1000 --timeout "$TIMEOUT" &
  local runner=$!
  sleep "$DOWN_AFTER"
  local downed
  downed=$(date +%s.%N)
  ip -n "$(host 1)" link set eth0 down
  local failed=0
  wait "$runner" || failed=$?
  local took
  took=$(awk -v a="$(date +%s.%N)" -v b="$downed" 'BEGIN { printf "%.1f", a - b }')
  echo "# link down at +$(awk -v a="$downed" -v b="$start" 'BEGIN { printf "%.1f", a - b }')s; all ranks exited ${took}s later; $failed of $NP ranks failed"
  for r in $(seq 0 $((NP - 1))); do
    echo "rank $r: $(grep -h '^collbench: rank' "$work/err.$r" | head -1 | cut -c1-400)"
  done
  ip -n "$(host 1)" link set eth0 up
  if [ "$failed" -ne "$NP" ]; then
    echo "netns.sh: linkdown: only $failed of $NP ranks reported an error" >&2
    return 1
  fi
}

overlap() {
  go build -o "$work/dataparallel" ./examples/dataparallel
  echo "# overlap: $NP ranks of examples/dataparallel $OVERLAP_ARGS, links ${RATE:-unlimited}"
  # shellcheck disable=SC2086
  if ! PROG=$work/dataparallel run $OVERLAP_ARGS; then
    cat "$work"/err.* >&2
    die "overlap run failed"
  fi
  cat "$work/out"
}

mode=${1:-all}
if [ "$mode" = down ]; then down; exit 0; fi
work=$(mktemp -d)
if [ -z "${COLLBENCH:-}" ]; then
  go build -o "$work/collbench" ./cmd/collbench
  COLLBENCH=$work/collbench
fi
trap 'down; rm -rf "$work"' EXIT
up
case $mode in
  compare) compare ;;
  linkdown) linkdown ;;
  overlap) overlap ;;
  all) compare; linkdown ;;
  *) die "unknown mode $mode (compare, linkdown, overlap, all, down)" ;;
esac
