package tcp

import "golang.org/x/sys/unix"

// unsent is how many bytes written to s are not yet acknowledged by the
// peer, or 0 when that cannot be told or they never will be: once the peer
// has reset the connection (it closed with input unread, or had closed when
// the bytes came), SIOCOUTQ still counts the bytes the reset dropped, and
// linger would wait its whole deadline for them.
func (s *stream) unsent() int {
	if s.raw == nil {
		return 0
	}
	n := 0
	s.raw.Control(func(fd uintptr) {
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil && ti.State == tcpClose {
			return
		}
		n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
	})
	return n
}

// tcpClose is the kernel's TCP_CLOSE socket state (include/net/tcp_states.h):
// the connection was reset, or closed and done with.
const tcpClose = 7

// shutDown reports whether the peer of socket fd has shut down its sending
// side (closed the connection or exited), whatever input is still unread.
func shutDown(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
}

// unread is how many bytes of input wait in socket fd's receive queue, or
// peekMax when the kernel does not say.
func unread(fd uintptr) int {
	n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	if err != nil || n < 0 {
		return peekMax
	}
	return n
}
