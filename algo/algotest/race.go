//go:build race

package algotest

// raceEnabled: the race detector is on, and the table samples its large
// counts (LargeCount).
const raceEnabled = true
