#!/usr/bin/env bash
# Process-level chaos for elastic communicators (issue 19): a verified
# all-reduce loop over NP local processes while one, chosen at random
# (rank 0 too), is killed with kill -9 every KILL_EVERY; a replacement
# joins after each kill. Prints a line per event and the summary (hangs,
# wrong elements, disagreements, detection/shrink/grow times against the
# issue's targets); exits 1 on any hang, wrong element or disagreement.
#
#   scripts/chaos.sh [EVENTS=100] [NP=8]
#   KILL_EVERY=1s SIZE=64K ALGO=ring TRANSPORT=tcp SEED=1 JSON=chaos.json scripts/chaos.sh
#   ETCD=1 STORE=etcd://127.0.0.1:2379/collkit-chaos scripts/chaos.sh
#
# ETCD=1 makes the processes meet in an etcd store (collbench elastic
# --store STORE, which becomes COLLKIT_STORE; replacements reach it through
# collkit.Join too). Without STORE the script starts its own etcd on
# loopback (Debian's etcd-server) and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${1:-100}
NP=${2:-8}
args=(--np "$NP" --events "$EVENTS" --regrow
  --kill-every "${KILL_EVERY:-1s}" --size "${SIZE:-64K}" --algo "${ALGO:-ring}"
  --transport "${TRANSPORT:-tcp}" --seed "${SEED:-$RANDOM}")
[[ -n ${JSON:-} ]] && args+=(--json "$JSON")
work=$(mktemp -d)
etcd_pid=
trap '[[ -n $etcd_pid ]] && kill "$etcd_pid" 2>/dev/null; rm -rf "$work"' EXIT
if [[ ${ETCD:-0} == 1 ]]; then
  if [[ -z ${STORE:-} ]]; then
    command -v etcd >/dev/null || { echo "ETCD=1: no etcd binary (apt-get install -y etcd-server)" >&2; exit 2; }
    port=$((20000 + RANDOM % 20000))
    etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$port" \
      --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
      --initial-cluster "default=http://127.0.0.1:$((port + 1))" >"$work/etcd.log" 2>&1 &
    etcd_pid=$!
    STORE=etcd://127.0.0.1:$port/collkit-chaos-$$
    echo "# etcd $(etcd --version | head -1) on 127.0.0.1:$port (pid $etcd_pid)"
  fi
  args+=(--store "$STORE")
fi

go build -o "$work/collbench" ./cmd/collbench
echo "# $(nproc) cores; collbench elastic ${args[*]}"
"$work/collbench" elastic "${args[@]}"
