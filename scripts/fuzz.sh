#!/usr/bin/env bash
# Runs every fuzz target of a network decoder for FUZZTIME each (default
# 60s) and prints the executions per target. CI runs only the seed corpora
# (plain `go test`); this script is for longer runs.
#
#   FUZZTIME=5m scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-60s}

targets=(
  "./transport FuzzDecodeHeader"          # frame header of every message
  "./transport/tcp FuzzDecodeHandshake"   # hello, accept/reject, challenge, proof
  "./transport/tcp FuzzRecv"              # the receive path over a real socket: header check, abort notices, payload
  "./bootstrap FuzzDecodeFrame"           # store protocol frames, auth frames included
  "./bootstrap FuzzDecodeRegistration"    # a rank's identity and the store's roster
)
summary=()
status=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  echo "== $pkg $name for $FUZZTIME"
  log=$(mktemp)
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$log"; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  summary+=("$(printf '%-16s %-22s %12s execs  %s' "$pkg" "$name" "${execs:-?}" "$result")")
  rm -f "$log"
done
echo
echo "== fuzzing summary ($FUZZTIME per target)"
printf '%s\n' "${summary[@]}"
exit $status
