#!/usr/bin/env bash
# The cost of TLS between ranks: makes a throw-away job CA and one rank
# certificate with openssl, then runs the same collbench sweep over plain
# TCP and over mutual TLS and prints both bus bandwidths per size.
#
#   scripts/tls-bench.sh [NP=4] [collbench flags...]
#   scripts/tls-bench.sh 4 -b 64K -e 64M -n 20
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-4}
shift || true
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-b 64K -e 16M -f 4 -n 10 -w 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/collbench" ./cmd/collbench
(
  cd "$work"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=collkit-job-ca \
    -keyout ca.key -out ca.pem 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=collkit-rank \
    -keyout rank.key -out rank.csr 2>/dev/null
  openssl x509 -req -in rank.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -out rank.pem 2>/dev/null
)
echo "# plain TCP"
"$work/collbench" --np "$NP" --transport tcp "${args[@]}" --json "$work/plain.json" | grep -v '^#'
echo "# mutual TLS (--tls-cert/--tls-key/--tls-ca)"
"$work/collbench" --np "$NP" "${args[@]}" --json "$work/tls.json" \
  --tls-cert "$work/rank.pem" --tls-key "$work/rank.key" --tls-ca "$work/ca.pem" | grep -v '^#'
python3 - "$work/plain.json" "$work/tls.json" <<'PY' || true
import json, sys
p, t = (json.load(open(f))["reports"][0]["rows"] for f in sys.argv[1:3])
print("# %12s %14s %14s %8s" % ("bytes", "plain us", "tls us", "tls/plain"))
for a, b in zip(p, t):
    x, y = a["out_of_place"]["time_us"], b["out_of_place"]["time_us"]
    print("  %12d %14.1f %14.1f %8.2f" % (a["bytes"], x, y, y / x))
PY
