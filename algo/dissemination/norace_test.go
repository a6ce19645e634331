//go:build !race

package dissemination_test

const raceEnabled = false
