//go:build race

package collkit_test

// The race detector allocates and makes sync.Pool drop buffers at random,
// so allocation counts mean nothing under it.
const raceDetector = true
