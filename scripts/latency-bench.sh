#!/usr/bin/env bash
# The small-message and algorithm-choice figures of docs/measurements-history.md (Earlier sessions), beside Open MPI
# in the same session, alternating runs: np 4 TCP latency 8 B-4 KiB (every
# algorithm against Open MPI btl=tcp), adaptive against the fixed algorithms
# (tune, then interleaved runs), hierarchical on 2 simulated nodes, and the
# shm native all-reduce against Open MPI btl=vader at np 2 and 4. Raw lines go
# to $OUT_DIR (default /tmp/collkit-latency); summarise with your tool of choice.
#
#   scripts/latency-bench.sh [REPS=5] [PART=all|lat|adaptive|hier|shm]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
part=${2:-all}
out=${OUT_DIR:-/tmp/collkit-latency}
mkdir -p "$out"
cb="$out/collbench"
go build -o "$cb" ./cmd/collbench
if ! command -v mpicc >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi
mpicc -O2 -o "$out/mpi_allreduce" ../shared/peers/mpi_allreduce.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { # np btl extra-mca min max
  mpirun --oversubscribe -np "$1" --mca btl "$2",self $3 "$out/mpi_allreduce" "$4" "$5" 20 2>&1 | grep -E '^ +[0-9]+ '
}
rows() { # json tag: one line per size: tag transport algorithm bytes time_us p50_us busbw busbw_inplace ran
  python3 - "$1" "$2" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))['reports']:
    for row in r['rows']:
        o, i = row['out_of_place'], row['in_place']
        print(sys.argv[2], r['transport'], r['algorithm'], row['bytes'], o['time_us'], o['p50_us'], o['busbw_gbs'], i['busbw_gbs'], row['algorithm'])
PY
}
if [ "$part" = all ] || [ "$part" = lat ]; then
  : >"$out/lat.txt"
  for rep in $(seq 1 "$reps"); do
    mpi 4 tcp "--mca btl_tcp_if_include lo" 8 4096 | awk -v r="$rep" '{print r, "mpi", "mpi", $1, $2}' >>"$out/lat.txt"
    "$cb" --np 4 --algo ring,tree,halvingdoubling -b 8 -e 4K -f 2 -q --json "$out/lat.json" >/dev/null
    rows "$out/lat.json" "$rep" | awk '{print $1, $2, $3, $4, $5}' >>"$out/lat.txt"
  done
fi
if [ "$part" = all ] || [ "$part" = adaptive ]; then
  "$cb" tune --np 4 -b 8 -e 64M -f 4 --min-time 1s -q --output "$out/tune.json" >"$out/tune.txt"
  : >"$out/adaptive.txt"
  for rep in $(seq 1 3); do
    "$cb" --np 4 --interleave --rounds 3 --min-time 1s --algo ring,tree,halvingdoubling,adaptive --tuning "$out/tune.json" \
      -b 8 -e 64M -f 4 -q --json "$out/adaptive.json" >"$out/adaptive-run$rep.txt"
    rows "$out/adaptive.json" "$rep" >>"$out/adaptive.txt"
  done
fi
if [ "$part" = all ] || [ "$part" = hier ]; then
  : >"$out/hier.txt"
  for rep in $(seq 1 3); do
    "$cb" --np 4 --nodes 2 --algo hierarchical,ring -b 8 -e 64M -f 4 -q --json "$out/hier.json" >/dev/null
    rows "$out/hier.json" "$rep" >>"$out/hier.txt"
  done
fi
if [ "$part" = all ] || [ "$part" = shm ]; then
  : >"$out/shm.txt"
  for rep in $(seq 1 "$reps"); do
    for np in 2 4; do
      mpi "$np" vader "" 8 67108864 | awk -v np="$np" -v r="$rep" '{print r, "vader", np, $1, $2, $4}' >>"$out/shm.txt"
      "$cb" --np "$np" --transport shm --algo native -b 8 -e 64M -f 2 -q --json "$out/shm.json" >/dev/null
      rows "$out/shm.json" "$rep" | awk -v np="$np" '{print $1, "shm", np, $4, $5, $7, $8}' >>"$out/shm.txt"
    done
  done
fi
echo "raw figures in $out"
