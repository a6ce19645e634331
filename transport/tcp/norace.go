//go:build !race

package tcp

func raceSync() {}
