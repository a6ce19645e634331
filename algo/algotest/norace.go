//go:build !race

package algotest

const raceEnabled = false
