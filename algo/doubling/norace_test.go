//go:build !race

package doubling_test

const raceEnabled = false
