//go:build race

package dissemination_test

// The race detector makes sync.Pool drop buffers at random, so allocation
// counts mean nothing under it.
const raceEnabled = true
