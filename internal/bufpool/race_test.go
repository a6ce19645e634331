//go:build race

package bufpool_test

// The race detector makes sync.Pool drop buffers at random, so reuse and
// allocation counts mean nothing under it.
const raceEnabled = true
