// Package bench measures collectives the way nccl-tests does: a sweep of
// message sizes, timed out-of-place and in-place runs, bus bandwidth, and an
// exact check of every element against seeded inputs (package verify).
//
// Every rank calls Run with the same Config. The time column
// (Measurement.TimeUS, and the algbw and busbw from it) is each rank's mean
// time per iteration combined over ranks as Config.RankTime says
// (nccl-tests' -a; the slowest rank's by default); every iteration's time is
// the slowest rank's for that iteration, summarised as min, p50, p99, max
// and coefficient of variation (Stats, nccl-tests' -I); the wrong-element
// counts are summed over ranks, and Checked says whether there are any.
// Without a fixed Iters, rank 0 picks the iteration count that reaches
// Config.MinTime and all ranks follow.
//
// Rank 0 usually prints the Report (WriteHeader, WriteRow, WriteFooter, each
// naming its statistics) and saves a File with WriteFile or WriteCSV; the
// layout is versioned (SchemaVersion) and described in SCHEMA.md. Compare
// decides whether a new File regressed against a baseline on repeated
// per-iteration samples and lists what it could not compare, and package
// bench/chart draws Files from the same time column the table prints. The Go benchmarks in this package
// (go test -bench . ./bench) time all-reduce inside one process for
// library users; their names are benchstat-friendly.
package bench
