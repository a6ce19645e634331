//go:build race

package pipeline_test

// The race detector allocates and makes sync.Pool drop what it holds at
// random, so allocation counts and reuse mean nothing under it.
const raceEnabled = true
