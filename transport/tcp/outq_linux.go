package tcp

import "golang.org/x/sys/unix"

// unsent is how many bytes written to s are not yet acknowledged by the
// peer, or 0 when that cannot be told.
func (s *stream) unsent() int {
	if s.raw == nil {
		return 0
	}
	n := 0
	s.raw.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	})
	return n
}
