// Command collbench measures and verifies collkit's collectives, in the
// manner of nccl-tests' all_reduce_perf. nccl-tests' flags (-b, -e, -f, -i,
// -n, -w, -m, -N, -a, -c, -d, -o, -r, -z, -I, -K, -T, -J ...) and OSU's
// (-m MIN:MAX, --iterations, -x, -f, -c ...) mean what they mean there, or
// fail with one line saying what to use instead (the README's table).
//
//	collbench --algo ring --size 16384          # 4 local ranks, shared memory (--transport auto)
//	collbench --algo ring --size 16384 --transport tcp   # the same over loopback TCP
//	collbench -b 8 -e 64M -f 2 --np 2 --json out.json
//	collbench -b 8 -e 128M -f 2 -a 1 -d all     # nccl-tests' habits
//	collbench -m 8:1M --iterations 1000 -x 100 -f   # OSU's habits
//	mpirun -np 4 collbench -b 1M -e 64M         # ranks from mpirun
//	collbench --algo all --transport all --json r.json --plot r.png
//	collbench compare base.json r.json --tolerance 10%
//	collbench plot base.json r.json -o both.svg
//	collbench --transport nccl -b 8 -e 256M -d all  # one rank per GPU, buffers in GPU memory
//	collbench --transport nccl --mem host           # host buffers staged through the GPU
//	collbench elastic --np 8 --events 100 --kill-every 1s --regrow   # kill -9 a rank every second: shrink, grow, verify
//
// With no rank variables in the environment collbench launches --np copies
// of itself on this machine; under torchrun, mpirun or srun every process is
// one rank. Rank 0 prints an nccl-tests style table; every rank checks its
// results exactly, and any wrong element makes the exit status 1. Bad flags
// and setup failures exit with status 2; a failed performance gate
// (--baseline, --min-bw, compare) exits with status 1.
package main
