//go:build !race

package collkit_test

const raceDetector = false
