package tcp

import (
	"encoding/binary"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/collkit/collkit/internal/clock"
)

// sleeper is what a receive that gave up polling needs to learn what its
// sleep cost: how long after its message arrived it got to run again,
// from the kernel's receive timestamp of the message's first byte
// (SO_TIMESTAMPNS, turned on at the stream's first sleep).
type sleeper struct {
	woke    time.Duration         // what the last sleep cost; < 0: unknown
	wokeAt  time.Duration         // when it ended (clock.Since)
	peekTS  func(fd uintptr) bool // made at the first sleep, which turns SO_TIMESTAMPNS on
	arrived int64                 // the receive timestamp peekTS found (Unix ns), or 0
	one     [1]byte
	oob     [64]byte
	tsIov   unix.Iovec
	tsMsg   unix.Msghdr
}

// sleep parks in the netpoller until the next message's first byte is in,
// without reading it, and records in s.woke how long after that byte
// arrived this goroutine ran again. The read deadline armed for the
// receive applies; on an error, or without a timestamp, s.woke stays
// unknown and the read that follows meets the error again.
func (s *stream) sleep() {
	s.woke = -1
	if !s.plain || s.raw == nil {
		return
	}
	if s.peekTS == nil {
		// The message this sleep waits for may have arrived unstamped.
		s.raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
		s.tsIov.Base = &s.one[0]
		s.tsIov.SetLen(len(s.one))
		s.tsMsg.Iov = &s.tsIov
		s.tsMsg.Iovlen = 1
		s.peekTS = func(fd uintptr) bool {
			s.tsMsg.Control = &s.oob[0]
			s.tsMsg.SetControllen(len(s.oob))
			_, _, errno := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&s.tsMsg)), unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if errno == unix.EAGAIN {
				return false // park until the socket is readable
			}
			if errno == 0 {
				s.arrived = stampOf(s.oob[:s.tsMsg.Controllen])
			}
			return true
		}
	}
	s.arrived = 0
	err := s.raw.Read(s.peekTS)
	now := time.Now()
	s.wokeAt = clock.Since()
	if err != nil || s.arrived == 0 {
		return
	}
	if d := now.Sub(time.Unix(0, s.arrived)); d >= 0 {
		s.woke = d
	}
}

// stampOf returns the SO_TIMESTAMPNS receive timestamp (Unix ns) among the
// control messages b, or 0. 64-bit only (a cmsg_len and a timespec of two
// 8-byte words); elsewhere 0.
func stampOf(b []byte) int64 {
	if unix.SizeofCmsghdr != 16 {
		return 0
	}
	for len(b) >= unix.SizeofCmsghdr {
		n := int(binary.NativeEndian.Uint64(b)) // cmsg_len: header and data
		level := int32(binary.NativeEndian.Uint32(b[8:]))
		typ := int32(binary.NativeEndian.Uint32(b[12:]))
		if n < unix.SizeofCmsghdr || n > len(b) {
			return 0
		}
		if level == unix.SOL_SOCKET && typ == unix.SO_TIMESTAMPNS && n >= unix.CmsgLen(16) {
			d := b[unix.CmsgLen(0):]
			return int64(binary.NativeEndian.Uint64(d))*1e9 + int64(binary.NativeEndian.Uint64(d[8:]))
		}
		b = b[min(len(b), unix.CmsgSpace(n-unix.SizeofCmsghdr)):]
	}
	return 0
}
