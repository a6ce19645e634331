#!/usr/bin/env bash
# Soak: OPS (default 10000) random all-reduces (random algorithm, size,
# dtype, op, in or out of place; the same sequence on every rank) over TCP
# between NP local ranks, every element verified exactly, with each rank's
# resident memory after a warm-up and at the end (max over ranks). Exits
# non-zero on a wrong element, an error or memory growth over MAX_GROWTH KiB.
#
#   scripts/soak.sh [OPS=10000] [NP=4]
#   MAX_BYTES=4M STREAMS=4 scripts/soak.sh 10000 8
set -euo pipefail
cd "$(dirname "$0")/.."
OPS=${1:-10000}
NP=${2:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/collsoak" ./cmd/collsoak
"$work/collsoak" --np "$NP" --ops "$OPS" --max-bytes "${MAX_BYTES:-1M}" --streams "${STREAMS:-2}" \
  --max-growth "${MAX_GROWTH:-32768}" --seed "${SEED:-$RANDOM}"
