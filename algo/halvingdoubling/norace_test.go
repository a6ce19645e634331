//go:build !race

package halvingdoubling_test

const raceEnabled = false
