//go:build !linux

package tcp

// unsent cannot be told on this platform; Abort then closes at once.
func (s *stream) unsent() int { return 0 }

// shutDown cannot be told on this platform behind unread input: a peer
// that exited after sending counts as alive until its input is read.
func shutDown(fd uintptr) bool { return false }

// unread cannot be told on this platform: peek looks through up to
// peekMax bytes.
func unread(fd uintptr) int { return peekMax }
