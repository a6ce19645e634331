#!/usr/bin/env bash
# footprint.sh measures the peak resident memory of every collbench rank
# (VmHWM, as /usr/bin/time's %M reports it) for each size, collective and
# algorithm, and prints the largest beside the footprint the README's
# "Memory" section predicts: the process at rest (measured at 8 bytes),
# collbench's buffers, and what the library holds beyond them. Shared
# memory segments (TRANSPORT=shm, and hierarchical, which runs shm inside
# the node) enter the formula whole, an upper bound: only the pages a rank
# touches are resident.
#
#   scripts/footprint.sh                   # np 2 over tcp, 1, 4, 16, 64 MiB
#   MAX=1G scripts/footprint.sh            # up to 1 GiB: about 2.1 GiB per rank
#   COLLS="allreduce alltoall reduce" ALGOS="ring tree halvingdoubling" \
#     TRANSPORT=shm NP=4 MAX=256M scripts/footprint.sh
#
# Environment: NP (ranks, default 2), TRANSPORT (tcp or shm, default tcp),
# MIN and MAX (sizes, K/M/G suffixes, defaults 1M and 64M), FACTOR (between
# sizes, default 4), COLLS (collbench --coll values, default "allreduce
# sendrecv"), ALGOS (all-reduce algorithms, default ring), ITERS (timed
# iterations per size, default 3), COLLBENCH (a collbench binary to measure
# instead of building this tree's, e.g. an older version's). Every rank
# holds about 2 x MAX plus
# the extras below, so with the machine shared, raise MAX with care: the
# full sweep to 1 GiB on np 2 takes about 5 GiB at its peak.
set -euo pipefail
cd "$(dirname "$0")/.."

NP=${NP:-2}
TRANSPORT=${TRANSPORT:-tcp}
MIN=${MIN:-1M}
MAX=${MAX:-64M}
FACTOR=${FACTOR:-4}
COLLS=${COLLS:-allreduce sendrecv}
ALGOS=${ALGOS:-ring}
ITERS=${ITERS:-3}

bytes() { numfmt --from=iec "$1"; }
min=$(bytes "$MIN")
max=$(bytes "$MAX")

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
if [ -n "${COLLBENCH:-}" ]; then
  cp "$COLLBENCH" "$work/collbench"
else
  go build -o "$work/collbench" ./cmd/collbench
fi
port=$((30000 + RANDOM % 20000))

# peak COLL ALGO SIZE: runs one collbench job of NP ranks, each its own
# process as torchrun starts them, and prints the largest peak RSS of its
# ranks in KiB.
peak() {
  local coll=$1 algo=$2 size=$3 pids=()
  port=$((port + 1))
  for rank in $(seq 0 $((NP - 1))); do
    RANK=$rank WORLD_SIZE=$NP LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$NP MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/time -f %M -o "$work/rss.$rank" \
      "$work/collbench" --quiet --bind none --transport "$TRANSPORT" --coll "$coll" --algo "$algo" --size "$size" \
      --iters "$ITERS" --warmup_iters 1 --check 1 >"$work/out.$rank" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  if [ "$failed" = 1 ]; then
    echo "collbench failed ($coll $algo $size):" >&2
    cat "$work"/out.* >&2
    exit 1
  fi
  sort -n "$work"/rss.* | tail -1
}

# predict COLL ALGO SIZE: the bytes a rank holds beyond the process at rest
# (the README's table): collbench's send and receive buffers, the largest
# extra of the library on any rank, and the transport's own.
predict() {
  awk -v coll="$1" -v algo="$2" -v s="$3" -v n="$NP" -v tr="$TRANSPORT" '
  function shm(n) { return n * ((n - 1) * 1048576 + 8 * 1048576) }  # mapped segments, at most
  BEGIN {
    b = int(s / 4 / n) * 4  # a block: whole float32 elements
    seg = 256 * 1024
    if (algo == "tree") seg = 2 * 128 * 1024
    # the largest block a transport takes without its receiver (Buffered)
    sendbuf = (tr == "shm") ? 786432 : 4194304
    slots = (n > 3) ? 2 : n - 2  # ring reduce-scatter out of place
    if (coll == "allreduce") { buf = 2 * s; extra = seg }
    else if (coll == "sendrecv") { buf = 2 * s; extra = 0 }
    else if (coll == "broadcast") { buf = s; extra = 0 }
    else if (coll == "reduce") {
      # ring above 64 KiB: the block sent to the root and the slots
      buf = 2 * s; extra = (s > 65536) ? (1 + slots) * b + seg : 2 * s
    }
    else if (coll == "allgather") { buf = s + b; extra = 0 }
    else if (coll == "reducescatter") { buf = s + b; extra = slots * b + seg }
    else if (coll == "alltoall") {
      # in place: the blocks that arrive before they leave
      buf = 2 * s; extra = ((b <= sendbuf) ? int((n - 1) / 2) : int(n / 2)) * b
    }
    else if (coll == "gather") { buf = s + b; extra = int(n / 2) * b }  # a subtree, root 0
    else if (coll == "scatter") {
      # root 0: rank v holds the blocks of its subtree and packs what it sends
      buf = s + b; extra = 0
      for (v = 0; v < n; v++) {
        held = 0
        if (v > 0) {
          stride = 2; while (stride <= v) stride *= 2
          held = int((n - v + stride - 1) / stride); if (held == 1) held = 0
        }
        most = 0
        for (st = 1; st < n; st *= 2) if (v < st && v + st < n) { m = int((n - v + st - 1) / (2 * st)); if (m > most) most = m }
        if ((held + most) * b > extra) extra = (held + most) * b
      }
    }
    t = 0
    if (tr == "shm" || algo == "hierarchical") t = shm(n)  # hierarchical: shm inside the node
    printf "%d %d %d\n", buf, extra, t
  }'
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

echo "# collbench peak RSS per rank (largest over $NP ranks), $TRANSPORT, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-14s %-16s %10s %10s %10s %10s %10s %10s %7s\n" coll algo bytes "rest MiB" "bufs MiB" "extra MiB" "formula" "measured" ratio
for coll in $COLLS; do
  algos=$ALGOS
  [ "$coll" = allreduce ] || algos=ring
  for algo in $algos; do
    rest=$(peak "$coll" "$algo" 8)
    for ((size = min; size <= max; size *= FACTOR)); do
      read -r buf extra t < <(predict "$coll" "$algo" "$size")
      got=$(peak "$coll" "$algo" "$size")
      formula=$(awk -v r="$rest" -v b="$buf" -v e="$extra" -v t="$t" 'BEGIN { printf "%d", r + (b + e + t) / 1024 }')
      printf "%-14s %-16s %10d %10s %10s %10s %10s %10s %7s\n" "$coll" "$algo" "$size" "$(mib "$rest")" \
        "$(mib $((buf / 1024)))" "$(mib $(((extra + t) / 1024)))" "$(mib "$formula")" "$(mib "$got")" \
        "$(awk -v a="$got" -v b="$formula" 'BEGIN { printf "%.2f", a / b }')"
    done
  done
done
