//go:build !linux

package tcp

import "time"

// sleeper is the state a receive that sleeps learns from; without the
// kernel's receive timestamps it learns only the wait.
type sleeper struct {
	woke   time.Duration // always unknown (< 0)
	wokeAt time.Duration
}

// sleep leaves the sleeping to the read that follows.
func (s *stream) sleep() { s.woke = -1 }
