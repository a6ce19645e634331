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

// shutDown reports whether the peer of socket fd has shut down its sending
// side (closed the connection or exited), whatever input is still unread.
func shutDown(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
}
