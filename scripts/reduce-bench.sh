#!/usr/bin/env bash
# reduce-bench.sh compares the float32 sum kernels of package reduce with the
# C reference ../shared/peers/reduce_bw.c (gcc -O3 -march=native, best of many
# repetitions) on this machine, now. Run it from the repository root:
#
#	scripts/reduce-bench.sh
#
# It prints, for 256 KiB, 4 MiB and 64 MiB buffers, C GB/s, Go GB/s (median of
# COUNT runs of the Go benchmark) and their ratio, for y += x:
#
#	Reduce          reduce.Reduce(Float32, Sum, y, x)
#	ReduceTo dst=a  reduce.ReduceTo(Float32, Sum, y, y, x)
#
# and for z = x + y into a third buffer (ReduceTo dst=new), which moves a third
# more bytes and is compared with the same loop in C, built here alongside.
# GB/s are bytes of the destination per second, 1e9 bytes, as in the C code.
# The C programs report the fastest of many passes and go test the mean pass,
# which on a shared machine is lower for buffers beyond L2, so the table also
# has the fastest Go pass (the best-GB/s metric of the benchmarks). All
# columns are medians over COUNT runs.
#
# Environment: REDUCE_BW_C (the C file), COUNT (default 5), BENCHTIME
# (default 500ms); machines shared with other work give noisy numbers.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
csrc=${REDUCE_BW_C:-../shared/peers/reduce_bw.c}
count=${COUNT:-5}
benchtime=${BENCHTIME:-500ms}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# z[i] = x[i] + y[i] with the timing method of reduce_bw.c.
cat >"$tmp/reduce_to_bw.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void run(size_t bytes) {
  float *x = malloc(bytes), *y = malloc(bytes), *z = malloc(bytes); size_t m = bytes / 4;
  memset(x, 1, bytes); memset(y, 2, bytes); memset(z, 0, bytes);
  int reps = (int)((1L << 30) / bytes) + 3; double best = 1e9;
  for (int i = 0; i < reps; i++) { double t = now(); for (size_t j = 0; j < m; j++) z[j] = x[j] + y[j]; t = now() - t; if (t < best) best = t; }
  printf("%12zu  f32 z=x+y %6.2f GB/s  [%g]\n", bytes, bytes / best / 1e9, (double)z[m / 2]);
  free(x); free(y); free(z);
}
int main(void) { run(256 << 10); run(4 << 20); run(64 << 20); return 0; }
EOF

gcc -O3 -march=native -o "$tmp/reduce_bw" "$csrc"
gcc -O3 -march=native -o "$tmp/reduce_to_bw" "$tmp/reduce_to_bw.c"
go test -c -o "$tmp/reduce.test" ./reduce/

# C and Go take turns, so that both see the same moods of a shared machine.
for i in $(seq "$count"); do
	echo "== run $i/$count: C $csrc, C z=x+y (gcc -O3 -march=native), Go (benchtime $benchtime)"
	"$tmp/reduce_bw" | tee -a "$tmp/c.txt"
	"$tmp/reduce_to_bw" | tee -a "$tmp/c3.txt"
	"$tmp/reduce.test" -test.run '^$' -test.bench '^BenchmarkReduce(To)?$/^float32$/^sum$/' \
		-test.benchtime "$benchtime" | grep '^Benchmark' | tee -a "$tmp/go.txt"
done

# One line per measurement: series size GB/s.
{
	awk '$6 == "y+=x" { print "C/y+=x", $1, $7 }' "$tmp/c.txt"
	awk '$3 == "z=x+y" { print "C/z=x+y", $1, $4 }' "$tmp/c3.txt"
	awk '/^Benchmark/ {
		name = $1
		sub(/-[0-9]+$/, "", name) # GOMAXPROCS suffix
		n = split(name, p, "/")
		size = p[n]
		bytes = size + 0
		if (size ~ /KiB$/) bytes *= 1024
		if (size ~ /MiB$/) bytes *= 1048576
		kernel = (p[1] == "BenchmarkReduce") ? "Reduce" : "ReduceTo_" p[4]
		for (i = 3; i <= NF; i++) {
			if ($i == "MB/s") print "Go/" kernel, bytes, $(i-1) / 1000
			if ($i == "best-GB/s") print "Best/" kernel, bytes, $(i-1)
		}
	}' "$tmp/go.txt"
} | sort -t' ' -k1,1 -k2,2n -k3,3g >"$tmp/all.txt"

# Medians per (series, size), then the table. "Go GB/s" is the mean over the
# passes of one benchmark run (the usual MB/s); "Go best" the fastest single
# pass, measured like the C code.
awk -v count="$count" '
	function flush() {
		if (key != "") med[key] = (cnt % 2) ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2
	}
	{
		k = $1 SUBSEP $2
		if (k != key) { flush(); key = k; cnt = 0 }
		v[++cnt] = $3
	}
	END {
		flush()
		printf "\nmedians of %d runs; C and \"Go best\": fastest pass of each run; \"Go GB/s\": mean pass (go test MB/s)\n", count
		printf "%-7s %-16s %-6s %7s %8s %6s %8s %6s\n", "size", "Go kernel", "C loop", "C GB/s", "Go GB/s", "ratio", "Go best", "ratio"
		nk = split("Reduce ReduceTo_dst=a ReduceTo_dst=new", ks, " ")
		ns = split("262144 4194304 67108864", sizes, " ")
		for (s = 1; s <= ns; s++) {
			for (i = 1; i <= nk; i++) {
				c = (ks[i] == "ReduceTo_dst=new") ? "C/z=x+y" : "C/y+=x"
				cv = med[c, sizes[s]]
				g = med["Go/" ks[i], sizes[s]]
				gb = med["Best/" ks[i], sizes[s]]
				label = (sizes[s] >= 1048576) ? sizes[s] / 1048576 "MiB" : sizes[s] / 1024 "KiB"
				name = ks[i]
				sub(/_/, " ", name)
				printf "%-7s %-16s %-6s %7.2f %8.2f %6.2f %8.2f %6.2f\n", label, name, substr(c, 3), cv, g,
					(cv > 0) ? g / cv : 0, gb, (cv > 0) ? gb / cv : 0
			}
		}
	}' "$tmp/all.txt"
