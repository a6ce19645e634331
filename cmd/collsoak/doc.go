// Command collsoak runs a long stream of random all-reduces (random
// algorithm, size, dtype and op, the same sequence on every rank) over TCP,
// verifies every result element by element against the exact expectation,
// and reports each rank's resident memory after a warm-up and at the end,
// which must stay flat.
//
//	collsoak --np 4 --ops 10000 --max-bytes 1M
//
// Like collbench it launches --np local ranks itself, or runs as one rank
// under torchrun, mpirun or srun (RANK, WORLD_SIZE, MASTER_ADDR, ...). It
// exits 1 on any wrong element or error, and when the resident memory grew
// by more than --max-growth.
package main
