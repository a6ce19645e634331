//go:build race

package tcp

import "sync/atomic"

// raceClock carries the happens-before edge of a message to the race
// detector, which sees none through the raw system calls that poll and
// write small messages: a rank that reads a buffer to send it, and later
// receives into it what the ring brought back, would be reported. Every
// send touches it before its bytes leave, and every receive after its bytes
// came and before they are copied out; only race builds do.
var raceClock atomic.Uint64

func raceSync() { raceClock.Add(1) }
