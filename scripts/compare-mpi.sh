#!/usr/bin/env bash
# Side-by-side all-reduce figures: Open MPI (../shared/peers/mpi-allreduce.sh,
# btl tcp and vader) and collbench over TCP, same sizes, same session,
# alternating REPS times so both see the same machine conditions.
# Usage: scripts/compare-mpi.sh [REPS] [NP...]     (default: 3 reps, np 2 4)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}; shift || true
nps=${*:-2 4}
peers=../shared/peers
out=${OUT_DIR:-/tmp/collkit-compare}
mkdir -p "$out"
go build -o "$out/collbench" ./cmd/collbench
for rep in $(seq 1 "$reps"); do
  for np in $nps; do
    echo "== rep $rep np $np: Open MPI"
    bash "$peers/mpi-allreduce.sh" "$np" | tee "$out/mpi-np$np-rep$rep.txt"
    echo "== rep $rep np $np: collbench --transport tcp"
    "$out/collbench" --np "$np" -b 8 -e 4K -f 8 -n 200 -w 20 -c 1 | tee "$out/collbench-lat-np$np-rep$rep.txt"
    "$out/collbench" --np "$np" -b 64K -e 64M -f 4 -n 20 -w 3 -c 1 | tee "$out/collbench-bw-np$np-rep$rep.txt"
  done
done
echo "results in $out"
