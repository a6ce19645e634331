//go:build !linux

package tcp

// unsent cannot be told on this platform; Abort then closes at once.
func (s *stream) unsent() int { return 0 }
