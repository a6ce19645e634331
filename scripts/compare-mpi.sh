#!/usr/bin/env bash
# One table: collkit (collbench) against Open MPI, run alternately in the
# same session, REPS rounds, medians per size. The time ratio is collkit's
# time over Open MPI's (below 1: collkit is faster); both are the slowest
# rank's mean time per call, out of place (Open MPI's always; collkit's
# in place too, in the last columns: send and recv the same buffer).
#
# Usage: scripts/compare-mpi.sh [REPS]        (default 3)
# Settings (environment):
#   NPS="2 3 4 8"            rank counts for the all-reduce (empty: none;
#                            NPS= COLLS= runs the headline alone)
#   TRANSPORTS="tcp shm"     collkit transport; Open MPI runs btl tcp for
#                            tcp and btl vader for shm
#   MIN=8 MAX=16M            all-reduce sweep (sizes double)
#   SIZES="8 64 512 4K 16K 64K 256K 1M 4M 16M"   rows printed
#   ALGOS="ring,tree,halvingdoubling,pairwise,adaptive"   over tcp; shm adds native
#   COLLS="broadcast allgather reducescatter alltoall gather scatter reduce barrier"
#                            at COLL_NP ranks (gather, scatter, reduce and
#                            barrier from scripts/mpi_rooted.c: the peers
#                            have none; barrier is one row of 0 bytes),
#   COLL_NP=4 COLL_SIZES="16 1M"                        over tcp
#   HEADLINE=5               alternating runs of the default command,
#                            collbench --algo ring --size 16384 (np 4,
#                            --transport auto: shm on one host), against
#                            Open MPI's 16 KiB all-reduce over vader, and
#                            both over tcp (0: none)
#   FLOOR=1                  at 2 ranks, also scripts/floor.c each round:
#                            two bare processes exchanging 8 bytes, the
#                            least any 2-rank all-reduce can cost, and
#                            scripts/gofloor, the same in Go: the least
#                            it can cost a Go program (0: neither)
#   OUT_DIR=/tmp/collkit-compare   raw outputs and the table (table.md);
#                            sweep.txt has every all-reduce size collkit
#                            measured, for adaptive's built-in table
#   TABLE_ONLY=1             print the table from OUT_DIR's raw.txt of an
#                            earlier (or interrupted) run, measuring nothing
#   SYSTEM_CONGESTION=cubic  the kernel's default TCP congestion control for
#                            the run (root; restored at the end). Open MPI
#                            uses the system's; collkit sets cubic (else
#                            reno) on its own sockets whatever it is.
# After the table: the headline, the floor, and how much of this VM's time
# its host took (steal, /proc/stat) during each side's sweeps.
# Needs Open MPI (mpicc, mpirun): ../shared/peers installs it when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
NPS=${NPS-2 3 4 8}
TRANSPORTS=${TRANSPORTS:-tcp shm}
MIN=${MIN:-8}
MAX=${MAX:-16M}
SIZES=${SIZES:-8 64 512 4K 16K 64K 256K 1M 4M 16M}
ALGOS=${ALGOS:-ring,tree,halvingdoubling,pairwise,adaptive}
COLLS=${COLLS-broadcast allgather reducescatter alltoall gather scatter reduce barrier}
COLL_NP=${COLL_NP:-4}
COLL_SIZES=${COLL_SIZES:-16 1M}
HEADLINE=${HEADLINE:-5}
FLOOR=${FLOOR:-1}
peers=../shared/peers
out=${OUT_DIR:-/tmp/collkit-compare}
mkdir -p "$out"
raw=$out/raw.txt
if [ -z "${TABLE_ONLY:-}" ]; then : >"$raw"; : >"$out/sweep.txt"; fi

bytes() { # 16K -> 16384
  local v=$1
  case $v in
    *K) echo $((${v%K} << 10)) ;;
    *M) echo $((${v%M} << 20)) ;;
    *G) echo $((${v%G} << 30)) ;;
    *) echo "$v" ;;
  esac
}
sizes() { # the rows a sweep keeps: " 8 64 ... "
  local w=" " s
  for s in "$@"; do w+="$(bytes "$s") "; done
  echo "$w"
}

# Open MPI with its headers: .ci/run installs only openmpi-bin (mpirun),
# and the peers' scripts install the headers only when mpicc is missing.
if [ -z "${TABLE_ONLY:-}" ] && ! echo '#include <mpi.h>' | mpicc -E -x c - >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi
[ -n "${TABLE_ONLY:-}" ] || go build -o "$out/collbench" ./cmd/collbench
if [ -z "${TABLE_ONLY:-}" ] && [ "$FLOOR" != 0 ]; then
  gcc -O2 -o "$out/floor" scripts/floor.c
  go build -o "$out/gofloor" ./scripts/gofloor
fi

ccfile=/proc/sys/net/ipv4/tcp_congestion_control
if [ -z "${TABLE_ONLY:-}" ] && [ -n "${SYSTEM_CONGESTION:-}" ]; then
  was=$(cat "$ccfile")
  trap 'echo "$was" >"$ccfile"' EXIT
  echo "$SYSTEM_CONGESTION" >"$ccfile" || { echo "SYSTEM_CONGESTION needs root" >&2; exit 1; }
fi
[ -n "${TABLE_ONLY:-}" ] || echo "system $(cat "$ccfile" 2>/dev/null || echo unknown)" >"$out/congestion.txt"

# stolen prints /proc/stat's "steal total" CPU counters, and steal_since
# MARK SIDE appends to raw.txt the share of this VM's time its host took
# (steal) since stolen printed MARK, in percent, as "steal SIDE PCT": a busy
# host slows both sides, and the side that lets its cores go idle more
# (a sleeping rank's core may go to another guest) more.
stolen() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit }' /proc/stat 2>/dev/null || echo "0 0"; }
steal_since() {
  echo "$1 $(stolen)" | awk -v side="$2" '{ d = $4 - $2; printf "steal %s %.0f\n", side, (d > 0 ? 100 * ($3 - $1) / d : 0) }' >>"$raw"
}

# mpi COLL NP MIN MAX BTL TR: appends "mpi COLL TR NP BYTES - TIME" lines.
# Open MPI's sweep starts one size below MIN, a row the table leaves out:
# as collbench's --warmup-time, so that neither side's first row carries
# its process's first milliseconds of collectives.
mpi() {
  local coll=$1 np=$2 lo=$3 hi=$4 btl=$5 tr=$6 log wanted
  wanted=$(sizes $SIZES)
  [ "$coll" = allreduce ] || wanted=$(sizes $COLL_SIZES)
  [ "$coll" != barrier ] || wanted=" 0 "
  log=$out/mpi-$coll-$tr-np$np-rep$rep.txt
  [ "$lo" -lt 2 ] || lo=$((lo / 2))
  local mark; mark=$(stolen)
  case $coll in
    gather | scatter | reduce | barrier) rooted "$coll" "$np" "$lo" "$hi" 20 "$btl" >"$log" ;;
    *) bash "$peers/mpi-colls.sh" "$coll" "$np" "$lo" "$hi" 20 "$btl" >"$log" ;;
  esac
  steal_since "$mark" mpi
  # The peers print the time to 0.1 us and the bandwidth (bytes / time) to
  # 0.001 GB/s: at 0.4 us (8 B over vader) the time is a quarter off, while
  # the bandwidth, 0.020, pins it within 2.5%. Whichever column is the more
  # precise gives the time.
  awk -v c="$coll" -v t="$tr" -v n="$np" -v w="$wanted" '
    $1 ~ /^[0-9]+$/ && index(w, " " $1 " ") {
      us = $2
      if (NF >= 3 && $3 > 0 && ($2 <= 0 || 0.0005 / $3 < 0.05 / $2)) us = sprintf("%.3f", $1 / $3 / 1000)
      print "mpi", c, t, n, $1, "-", us
    }' "$log" >>"$raw"
}

# rooted COLL NP MIN MAX ITERS BTL: Open MPI's gather, scatter or reduce
# from scripts/mpi_rooted.c, run as ../shared/peers/mpi-colls.sh runs its
# program.
rooted() {
  local mca=(--mca btl vader,self)
  [ "$6" = tcp ] && mca=(--mca btl tcp,self --mca btl_tcp_if_include lo)
  [ "$out/mpi_rooted" -nt scripts/mpi_rooted.c ] || mpicc -O2 -o "$out/mpi_rooted" scripts/mpi_rooted.c
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -np "$2" "${mca[@]}" "$out/mpi_rooted" "$1" "$3" "$4" "$5" 2>&1 | grep -v -i warn
}

# collkit COLL NP MIN MAX TR ALGOS: appends "collkit COLL TR NP BYTES ALGO TIME".
collkit() {
  local coll=$1 np=$2 lo=$3 hi=$4 tr=$5 algos=$6 csv wanted
  wanted=$(sizes $SIZES)
  [ "$coll" = allreduce ] || wanted=$(sizes $COLL_SIZES)
  [ "$coll" != barrier ] || wanted=" 0 "
  csv=$out/collkit-$coll-$tr-np$np-rep$rep.csv
  local args=(--np "$np" --coll "$coll" --transport "$tr" -f 2 -c 1 -q --csv "$csv")
  [ "$coll" = barrier ] || args+=(-b "$lo" -e "$hi")
  # --seed turns which algorithm goes first at a size from round to round.
  if [ "$coll" = allreduce ]; then args+=(--algo "$algos" --interleave --seed "$rep"); fi
  local mark; mark=$(stolen)
  "$out/collbench" "${args[@]}" >"$out/collkit-$coll-$tr-np$np-rep$rep.txt"
  steal_since "$mark" collkit
  awk -F, -v c="$coll" -v t="$tr" -v n="$np" -v w="$wanted" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    index(w, " " $col["bytes"] " ") {
      a = $col["algorithm"]; if (a ~ /^per size/) a = $col["ran_algorithm"]
      # In place (send = recv) goes in as ALGO/in-place.
      if ($col["placement"] == "in_place") a = a "/in-place"
      print "collkit", c, t, n, $col["bytes"], a, $col["time_us"]
    }' "$csv" >>"$raw"
  [ "$coll" = allreduce ] && sweep "$csv" >>"$out/sweep.txt"
  return 0
}

# sweep CSV: every size of a collbench all-reduce sweep, out of place, as
# raw.txt's lines, for adaptive's built-in table
# (algo/adaptive/internal/mkbuiltin): the table's rows are 10 of its 22
# sizes, and a choice between them is only as good as the fit's guess.
sweep() {
  awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["placement"] == "out_of_place" {
      a = $col["algorithm"]; if (a ~ /^per size/) a = $col["ran_algorithm"]
      print "collkit allreduce", $col["transport"], $col["ranks"], $col["bytes"], a, $col["time_us"]
    }' "$1"
}

for rep in $(seq 1 "$reps"); do
  [ -z "${TABLE_ONLY:-}" ] || break
  for tr in $TRANSPORTS; do
    btl=tcp algos=$ALGOS
    if [ "$tr" = shm ]; then btl=vader algos=native,$ALGOS; fi
    for np in $NPS; do
      echo "== round $rep/$reps: all-reduce, np $np, $tr (Open MPI btl $btl, then collkit)" >&2
      mpi allreduce "$np" "$(bytes "$MIN")" "$(bytes "$MAX")" "$btl" "$tr"
      collkit allreduce "$np" "$MIN" "$MAX" "$tr" "$algos"
      if [ "$np" = 2 ] && [ "$FLOOR" != 0 ]; then
        "$out/floor" "$tr" 20000 8 | awk '{ print "floor", $2, $4 }' >>"$raw"
        "$out/gofloor" "$tr" 20000 8 | awk '{ print "floor-go", $2, $4 }' >>"$raw"
      fi
    done
  done
  for coll in $COLLS; do
    each=$COLL_SIZES
    [ "$coll" != barrier ] || each=0
    for s in $each; do
      echo "== round $rep/$reps: $coll $s, np $COLL_NP, tcp" >&2
      mpi "$coll" "$COLL_NP" "$(bytes "$s")" "$(bytes "$s")" tcp tcp
      collkit "$coll" "$COLL_NP" "$s" "$s" tcp ""
    done
  done
done

# The headline: the command a new user runs first, as it is, against Open
# MPI's all-reduce as it is (btl vader on one host, which is what mpirun
# takes there; collbench's --transport auto takes shm), then both over TCP
# (Open MPI from 8 KiB, so that its 16 KiB row is not its first; see mpi
# above).
for rep in $(seq 1 "$HEADLINE"); do
  [ -z "${TABLE_ONLY:-}" ] || break
  for tr in default tcp; do
    echo "== headline $rep/$HEADLINE ($tr): collbench --algo ring --size 16384, then Open MPI" >&2
    key=headline; btl=vader; more=()
    if [ "$tr" = tcp ]; then key=headline-tcp; btl=tcp; more=(--transport tcp); fi
    mark=$(stolen)
    "$out/collbench" --algo ring --size 16384 -q "${more[@]}" |
      awk -v k="$key" '$1 == 16384 { print k, "collkit", $6 }' >>"$raw"
    steal_since "$mark" collkit
    mark=$(stolen)
    bash "$peers/mpi-colls.sh" allreduce 4 8192 16384 20 "$btl" |
      awk -v k="$key" '$1 == 16384 { print k, "mpi", $2 }' >>"$raw"
    steal_since "$mark" mpi
  done
done

# Medians over the rounds, then per row: Open MPI, collkit's best algorithm,
# ring and adaptive (all-reduce) and the ratios.
{ grep -v -e '^headline' -e '^floor ' -e '^floor-go ' -e '^steal ' "$raw" || true; } | sort -k1,1 -k2,2 -k3,3 -k4,4n -k5,5n -k6,6 -k7,7g | awk '
  function flush() {
    if (key == "") return
    med[key] = vals[int((n + 1) / 2)]
    n = 0
  }
  { k = $1 " " $2 " " $3 " " $4 " " $5 " " $6
    if (k != key) { flush(); key = k }
    vals[++n] = $7 }
  END {
    flush()
    for (k in med) {
      split(k, f, " ")
      row = f[2] " " f[3] " " f[4] " " f[5]
      rows[row] = 1
      if (f[1] == "mpi") mpi[row] = med[k]
      else if (f[6] ~ /\/in-place$/) {
        if (!(row in ibest) || med[k] < ibest[row]) { ibest[row] = med[k]; ibestAlgo[row] = substr(f[6], 1, length(f[6]) - 9) }
      } else {
        t[row, f[6]] = med[k]
        if (!(row in best) || med[k] < best[row]) { best[row] = med[k]; bestAlgo[row] = f[6] }
      }
    }
    for (row in rows) print row, (row in mpi ? mpi[row] : "-"), (row in best ? best[row] : "-"), \
      (row in best ? bestAlgo[row] : "-"), ((row, "ring") in t ? t[row, "ring"] : "-"), \
      ((row, "adaptive") in t ? t[row, "adaptive"] : "-"), (row in ibest ? ibest[row] : "-"), \
      (row in ibest ? ibestAlgo[row] : "-")
  }' | sort -k1,1 -k2,2 -k3,3n -k4,4n | awk -v date="$(date -u +%Y-%m-%d)" -v reps="$reps" -v host="$(nproc) cores" \
  -v cc="$(cut -d' ' -f2 "$out/congestion.txt" 2>/dev/null || echo unknown)" '
  function ratio(a, b) { return (a == "-" || b == "-" || b == 0) ? "-" : sprintf("%.2f", a / b) }
  function us(a) { return a == "-" ? a : sprintf(a < 1 ? "%.2f" : "%.1f", a) }
  function size(b) { return b >= 1048576 ? b / 1048576 " MiB" : b >= 1024 ? b / 1024 " KiB" : b " B" }
  NR == 1 {
    print "Measured " date " on " host ", medians of the alternating rounds (" reps " asked); times in us (slowest rank, mean per call); ratio = collkit / Open MPI. TCP congestion control: Open MPI the kernel default (" cc "), collkit its own default (cubic, else reno)."
    print ""
    print "| collective | transport | np | size | Open MPI | collkit best (algorithm) | ratio | ring | ratio | adaptive | ratio | in place, best (algorithm) | ratio |"
    print "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  }
  { ip = $10 == "-" ? "-" : us($10) " (" $11 ")"
    printf "| %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, size($4), us($5), us($6), $7, ratio($6, $5), us($8), ratio($8, $5), us($9), ratio($9, $5), ip, ratio($10, $5) }
' | tee "$out/table.md"
for key in headline headline-tcp; do
  { grep "^$key " "$raw" || true; } | sort -k2,2 -k3,3g | awk -v k="$key" '
    { v[$2] = v[$2] " " $3; n[$2]++; all[$2, n[$2]] = $3 }
    END {
      if (!n["collkit"] || !n["mpi"]) exit
      c = all["collkit", int((n["collkit"] + 1) / 2)]; m = all["mpi", int((n["mpi"] + 1) / 2)]
      if (k == "headline") what = "`collbench --algo ring --size 16384` (np 4, every default: --transport auto, shm here) against Open MPI as mpirun runs it (btl vader on one host)"
      else what = "the same over TCP, `--transport tcp` against btl tcp"
      printf "\nHeadline, %s: collkit %.1f us, Open MPI %.1f us, ratio %.2f (medians of %d alternating runs; collkit:%s; Open MPI:%s)\n", what, c, m, c / m, n["collkit"], v["collkit"], v["mpi"]
    }' | tee -a "$out/table.md"
done
{ grep -e '^floor ' -e '^floor-go ' "$raw" || true; } | sort -k1,1 -k2,2 -k3,3g | awk '
  { k = $1 " " $2; v[k] = v[k] " " $3; n[k]++; all[k, n[k]] = $3 }
  function show(k, what, end) {
    if (n[k]) printf " %s %.2f us (runs:%s)%s", what, all[k, int((n[k] + 1) / 2)], v[k], end
  }
  END {
    if (!n["floor tcp"] && !n["floor shm"]) exit
    printf "\nFloor at 2 ranks, 8 B (in the same rounds): two bare processes, one per core, each sending 8 bytes to the other and waiting for the other'"'"'s, nothing else. In C (scripts/floor.c):"
    show("floor tcp", "tcp (a write and a polled recv)", ";")
    show("floor shm", "shared memory (a cache line each way)", ".")
    if (n["floor-go tcp"] || n["floor-go shm"]) printf " In Go (scripts/gofloor, the same system calls and stores):"
    show("floor-go tcp", "tcp", ";")
    show("floor-go shm", "shared memory", ".")
    printf "\n"
  }' | tee -a "$out/table.md"
{ grep '^steal ' "$raw" || true; } | sort -k2,2 -k3,3n | awk '
  { n[$2]++; v[$2, n[$2]] = $3; sum[$2] += $3 }
  END {
    if (!n["collkit"] || !n["mpi"]) exit
    printf "\nHost steal (the share of this VM'"'"'s time its host took, /proc/stat) during each side'"'"'s sweeps: Open MPI mean %.0f%%, median %d%%, at most %d%% (%d sweeps); collkit mean %.0f%%, median %d%%, at most %d%% (%d sweeps).\n", \
      sum["mpi"] / n["mpi"], v["mpi", int((n["mpi"] + 1) / 2)], v["mpi", n["mpi"]], n["mpi"], \
      sum["collkit"] / n["collkit"], v["collkit", int((n["collkit"] + 1) / 2)], v["collkit", n["collkit"]], n["collkit"]
  }' | tee -a "$out/table.md"
echo "raw outputs and table.md in $out" >&2
