//go:build race

package shm

import "sync/atomic"

// raceClock carries happens-before edges the race detector cannot see: it
// ignores atomics outside the Go heap, so the head, tail and barrier words
// in the segments order nothing for it, and a rank that reuses a buffer
// after its peers have read it through the ring would be reported. Every
// publish and every observation of a peer's progress also touches raceClock,
// which only race builds do.
var raceClock atomic.Uint64

func raceSync() { raceClock.Add(1) }
