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
# --store STORE, which becomes COLLKIT_STORE; start etcd yourself). Not
# yet tried: collkit.Join still dials a TCP store (env.StoreAddr), so the
# replacements may not reach an etcd store until Join learns the URL.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${1:-100}
NP=${2:-8}
args=(--np "$NP" --events "$EVENTS" --regrow
  --kill-every "${KILL_EVERY:-1s}" --size "${SIZE:-64K}" --algo "${ALGO:-ring}"
  --transport "${TRANSPORT:-tcp}" --seed "${SEED:-$RANDOM}")
[[ -n ${JSON:-} ]] && args+=(--json "$JSON")
if [[ ${ETCD:-0} == 1 ]]; then
  : "${STORE:=etcd://127.0.0.1:2379/collkit-chaos-$$}"
  args+=(--store "$STORE")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/collbench" ./cmd/collbench
echo "# $(nproc) cores; collbench elastic ${args[*]}"
"$work/collbench" elastic "${args[@]}"
