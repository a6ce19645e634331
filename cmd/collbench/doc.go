// Command collbench measures and verifies collkit's collectives, in the
// manner of nccl-tests' all_reduce_perf.
//
//	collbench --algo ring --size 16384          # 4 local ranks over TCP
//	collbench -b 8 -e 64M -f 2 --np 2 --json out.json
//	mpirun -np 4 collbench -b 1M -e 64M         # ranks from mpirun
//	collbench --algo all --transport all --json r.json --plot r.png
//	collbench compare base.json r.json --tolerance 10%
//	collbench plot base.json r.json -o both.svg
//
// With no rank variables in the environment collbench launches --np copies
// of itself on this machine; under torchrun, mpirun or srun every process is
// one rank. Rank 0 prints an nccl-tests style table; every rank checks its
// results exactly, and any wrong element makes the exit status 1. Bad flags
// and setup failures exit with status 2; a failed performance gate
// (--baseline, --min-bw, compare) exits with status 1.
package main
