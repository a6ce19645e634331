// Package bench measures collectives the way nccl-tests does: a sweep of
// message sizes, timed out-of-place and in-place runs, bus bandwidth, and an
// exact check of every element against seeded inputs (package verify).
//
// Every rank calls Run with the same Config; the times reported are the
// slowest rank's and the wrong-element counts are summed over ranks. Rank 0
// usually prints the Report with WriteTable and saves it with WriteJSON.
package bench
