package tcp

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/internal/spin"
	"github.com/collkit/collkit/transport"
)

// smallMax is the largest payload sent by copying it behind the header into
// one buffer and received with one bounded read; larger payloads go out with
// writev and come in straight into the caller's buffer.
const smallMax = 16 << 10

// States of stream.wstate.
const (
	wIdle    = 0
	wBusy    = 1
	wNoticed = 2
)

// notify sends an abort notice carrying reason, unless a send is in
// progress (its bytes would interleave) or a notice already went out. It
// waits at most until dl and reports whether the notice was written.
func (s *stream) notify(reason string, dl time.Time) bool {
	if !s.wstate.CompareAndSwap(wIdle, wNoticed) {
		return false
	}
	if len(reason) > transport.MaxAbortReason {
		reason = reason[:transport.MaxAbortReason]
	}
	b := make([]byte, transport.HeaderSize+len(reason))
	transport.Header{Coll: transport.CollAbort, Root: -1, Len: uint32(len(reason))}.Encode(b)
	copy(b[transport.HeaderSize:], reason)
	s.whook.set(dl)
	_, err := s.conn.Write(b)
	return err == nil
}

// linger waits until the kernel has sent everything written to s, or until
// the deadline, so that closing the socket does not reset the connection
// and drop an abort notice still in flight. The kernel gives no event for
// this, so it polls the send queue every millisecond.
func (s *stream) linger(until time.Time) {
	for s.unsent() > 0 && time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
}

// pollMax is the largest message a receive polls for (Config.SpinWait)
// before sleeping when this host has more ranks than cores: a small
// message's latency is mostly the wake-up that polling saves, while a large
// one takes long enough to arrive that polling only takes the core from
// ranks that are moving data (measured with 4 ranks on 2 cores: 1 MiB
// all-reduce busbw 1.2 GB/s polling, 1.4 without). When every rank of the
// host has a core of its own, a receive polls for messages of any size,
// and for the rest of a large one as long as its bytes keep coming (see
// readPolled): with 2 ranks on 2 cores, a 1 MiB ring all-reduce took
// 410-480 us parking in the netpoller between a message's pieces and
// 340-390 us polling.
const pollMax = 64 << 10

// What poll found.
type pollResult int

const (
	pollOff    pollResult = iota // it did not poll: the budget is zero, or no raw socket
	pollAtOnce                   // the message was there at the first look
	pollFound                    // the message came while it polled
	pollGaveUp                   // the budget ran out first: the read sleeps
)

// aLongTimeAgo is a deadline in the past, used to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// stream is one TCP connection to a peer. One goroutine at a time sends on
// it and one at a time receives; the two sides share nothing but the socket.
type stream struct {
	conn net.Conn // a *net.TCPConn, or a *tls.Conn over one

	// Send side.
	wstate atomic.Int32 // wIdle, wBusy (a send in progress) or wNoticed (an abort notice went out)
	wbuf   []byte       // header and small payload
	iov    [2][]byte
	bufs   net.Buffers
	whook  *hook
	wnowFn func(fd uintptr) bool // writes wnow without waiting; made once
	wnow   []byte                // what wnowFn writes
	wn     int                   // what it wrote
	werr   error                 // and the error it got

	// Receive side.
	raw       syscall.RawConn
	budget    spin.Budget      // how long poll polls before a read may park
	peekFn    func(fd uintptr) // sets ready; made once so polling does not allocate
	ready     bool
	probe     []byte                // what peekFn reads into: one byte, or rbuf's start (see poll)
	plain     bool                  // conn is the raw socket (no TLS), so poll may read from it
	pre       int                   // bytes of the next message poll already read into rbuf
	pollAll   bool                  // poll for messages of any size: the ranks of this host have a core each
	sleeper                         // what a receive that sleeps learns (sleep_linux.go)
	readFn    func(fd uintptr) bool // reads into rdst without waiting; made once
	rdst      []byte                // what readFn reads into
	rn        int                   // what it read, or -1
	rerr      syscall.Errno         // and the error it got
	rbuf      []byte                // header and small payload
	rhook     *hook
	notice    []byte                  // the start of an abort notice, once one arrived
	known     *atomic.Pointer[string] // the peer's abort reason, once found on any stream
	noticing  atomic.Bool             // readNotice is reading a reason; see close
	closeMu   sync.Mutex              // orders close with readNotice
	closed    bool                    // close was called
	noticeHdr transport.Header        // its header

	// Peeking at the next header from another goroutine (Transport.Peek).
	headMu sync.Mutex
	head   [transport.HeaderSize]byte
	headN  int
	headFn func(fd uintptr) // fills head; made once so the watch does not allocate
}

// peekHeader returns the header of the next message when its bytes have
// arrived, without consuming them. Only on a plain socket: under TLS they
// are ciphertext.
func (s *stream) peekHeader() (transport.Header, bool) {
	if !s.plain || s.raw == nil {
		return transport.Header{}, false
	}
	s.headMu.Lock()
	defer s.headMu.Unlock()
	s.headN = 0
	s.raw.Control(s.headFn)
	if s.headN != len(s.head) {
		return transport.Header{}, false
	}
	h, err := transport.Decode(s.head[:])
	return h, err == nil
}

// poll waits for the next message by polling the socket for up to the
// budget's Next,
// the way MPI's progress engines do, before the read that follows parks the
// goroutine: waking a parked goroutine (and an idle CPU) costs more than a
// small message takes to cross loopback.
//
// For a small message (want bytes of header and payload, at most rbuf's
// length) on a plain socket, polling reads the message's first bytes into
// rbuf rather than peeking at them, saving a system call per message; s.pre
// records how many. Otherwise it only peeks.
//
// It reports whether the message was there at the first look, as for
// most small messages between 2 ranks (the wait then took no time worth a
// clock read, 21 ns on the 2-core VMs, to teach the budget), came while
// polling, or did not come within the budget, so that the read that
// follows sleeps.
func (s *stream) poll(want int, start time.Duration) pollResult {
	budget := s.budget.Next()
	if budget <= 0 || s.raw == nil {
		return pollOff
	}
	s.probe = s.rbuf[:1]
	if s.plain && want <= len(s.rbuf) {
		s.probe = s.rbuf[:want]
	}
	deadline := start + budget
	for i := 0; ; i++ {
		s.ready = false
		s.raw.Control(s.peekFn)
		if s.ready {
			if i == 0 {
				return pollAtOnce
			}
			return pollFound
		}
		// Every fourth poll: the clock, and the other goroutines of this
		// process (a helper that sends while this one receives). Each
		// costs more than a poll's system call that finds nothing: with
		// both at every poll, they were a tenth of a 2-rank 16-byte
		// all-reduce's time (perf).
		if i&3 == 3 {
			if clock.Since() > deadline {
				return pollGaveUp
			}
			runtime.Gosched()
		}
		// Give the core to whoever needs it (another rank of this job, when
		// ranks outnumber cores).
		spin.Yield()
	}
}

func newStream(c net.Conn) *stream {
	s := &stream{
		conn:  c,
		wbuf:  make([]byte, transport.HeaderSize+smallMax),
		rbuf:  make([]byte, transport.HeaderSize+smallMax),
		known: new(atomic.Pointer[string]), // the peer's own, once connected
	}
	// The raw socket, for polling and peeking: under TLS it carries
	// ciphertext, so peeking tells only whether the peer hung up.
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	} else {
		s.plain = true
	}
	if tc, ok := c.(*net.TCPConn); ok {
		s.raw, _ = tc.SyscallConn()
	}
	// The polls and the first write of a small message are raw system
	// calls, which never block (MSG_DONTWAIT, and Go's sockets are
	// non-blocking): through syscall.Syscall, a poll or write during which
	// the kernel runs another rank on this core (ranks outnumbering cores)
	// looks to the Go runtime like a blocked system call, and it moves the
	// goroutine's P to another thread (see spin.Yield).
	s.headFn = func(fd uintptr) {
		r, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.head[0])),
			uintptr(len(s.head)), syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if errno == 0 {
			s.headN = int(r)
		}
	}
	s.peekFn = func(fd uintptr) {
		flags := syscall.MSG_DONTWAIT
		if len(s.probe) == 1 {
			flags |= syscall.MSG_PEEK
		}
		r, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.probe[0])),
			uintptr(len(s.probe)), uintptr(flags), 0, 0)
		n := int(r)
		if errno != 0 {
			n = -1
		}
		if n > 0 && len(s.probe) > 1 {
			s.pre = n
		}
		// 0 bytes without an error: the peer hung up, which the read
		// that follows reports.
		s.ready = n >= 0 || errno != syscall.EAGAIN
	}
	s.readFn = func(fd uintptr) bool {
		r, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rdst[0])), uintptr(len(s.rdst)))
		s.rn, s.rerr = int(r), errno
		if errno != 0 {
			s.rn = -1
		}
		return true // never wait: readPolled decides
	}
	s.wnowFn = func(fd uintptr) bool {
		s.wn, s.werr = -1, nil
		r, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&s.wnow[0])), uintptr(len(s.wnow)))
		if errno != 0 {
			s.werr = errno
		} else {
			s.wn = int(r)
		}
		return true // never wait: send falls back to the armed write
	}
	s.whook = &hook{cut: s.conn.SetWriteDeadline}
	s.rhook = &hook{cut: s.conn.SetReadDeadline}
	return s
}

// hook interrupts one side of a stream when the context of its call ends:
// its abort sets a deadline in the past. Registrations stay with the
// contexts of the last calls when those can be compared, so that the next
// call under one of them (a communicator passes one context to every
// message of a collective, and to one collective after another; its
// collectives' helper goroutines share another) registers nothing:
// context.AfterFunc costs allocations and its context's lock. An abort
// acts only while a call under its own context is in progress, so a
// context kept from an earlier call cannot cut a later one short.
type hook struct {
	mu      sync.Mutex
	active  bool            // a call is in progress
	ctx     context.Context // its context, when it can be compared
	call    uint64          // numbers the calls
	aborted bool            // an abort set the deadline in the past
	kept    [2]registration
	next    int                   // the slot the next registration takes
	once    registration          // of a call whose context cannot be kept
	cut     func(time.Time) error // sets the side's deadline
	dl      time.Time             // the deadline it last set
	dlOK    bool                  // dl is what the socket has
}

type registration struct {
	ctx  context.Context
	stop func() bool
}

// arm readies the side for a call under ctx; done ends the call.
func (k *hook) arm(ctx context.Context) error {
	comparable := reflect.TypeOf(ctx).Comparable()
	k.mu.Lock()
	if k.aborted {
		k.aborted, k.dlOK = false, false
	}
	k.active, k.ctx = true, nil
	if comparable {
		k.ctx = ctx
	}
	k.call++
	call := k.call
	k.mu.Unlock()
	if ctx.Done() == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !comparable {
		k.once = registration{ctx, context.AfterFunc(ctx, func() { k.abort(nil, call) })}
		return nil
	}
	for _, r := range k.kept {
		if r.ctx == ctx {
			return nil
		}
	}
	if old := k.kept[k.next]; old.stop != nil {
		old.stop()
	}
	k.kept[k.next] = registration{ctx, context.AfterFunc(ctx, func() { k.abort(ctx, 0) })}
	k.next = (k.next + 1) % len(k.kept)
	return nil
}

func (k *hook) done() {
	k.mu.Lock()
	k.active, k.ctx = false, nil
	k.mu.Unlock()
	if k.once.stop != nil {
		k.once.stop()
		k.once = registration{}
	}
}

// abort cuts the call in progress short if it runs under ctx, a kept
// context, or is call, one whose context cannot be compared.
func (k *hook) abort(ctx context.Context, call uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.active && (ctx != nil && k.ctx == ctx || ctx == nil && k.call == call) {
		k.cut(aLongTimeAgo)
		k.aborted = true
	}
}

// deadline gives the side dl, calling cut only when dl differs from the
// deadline it set before, unless an abort has cut the call in progress
// short since arm: that deadline in the past must stand, or a cancel that
// came between arm and here would be undone and the call would wait with
// no deadline (a Recv canceled as it stopped polling hung in CI this way).
func (k *hook) deadline(dl time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.aborted || k.dlOK && dl.Equal(k.dl) {
		return nil
	}
	if err := k.cut(dl); err != nil {
		return err
	}
	k.dl, k.dlOK = dl, true
	return nil
}

// set sets the side's deadline to dl outside any call (to write an abort
// notice, or read one's reason), so that the next call sets its own again.
func (k *hook) set(dl time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut(dl)
	k.dlOK = false
}

// armWrite gives the write side ctx's deadline, calling SetWriteDeadline only
// when it changed, and arms cancellation when ctx can be cancelled. The
// caller calls s.whook.done after the write.
func (s *stream) armWrite(ctx context.Context) error {
	if err := s.whook.arm(ctx); err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	return s.whook.deadline(dl)
}

// armRead is armWrite for the read side; the caller calls s.rhook.done.
func (s *stream) armRead(ctx context.Context) error {
	if err := s.rhook.arm(ctx); err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	return s.rhook.deadline(dl)
}

// send writes h and p. It returns how many bytes went out, so the caller
// knows whether the byte stream is still in step after an error.
func (s *stream) send(ctx context.Context, h transport.Header, p []byte) (int, error) {
	if !s.wstate.CompareAndSwap(wIdle, wBusy) {
		return 0, net.ErrClosed // an abort notice went out: this rank is giving up
	}
	defer s.wstate.Store(wIdle)
	var b []byte // a small message, header and payload
	done := 0
	if len(p) <= smallMax {
		b = s.wbuf[:transport.HeaderSize+len(p)]
		h.Encode(b)
		copy(b[transport.HeaderSize:], p)
		raceSync()
		// It usually fits in the socket buffer: one write, without arming
		// the context (a registration and two allocations).
		if s.plain && s.raw != nil {
			if done = s.writeNow(ctx, b); done == len(b) {
				return done, nil
			}
		}
	}
	raceSync()
	err := s.armWrite(ctx)
	if err != nil {
		s.whook.done()
		return done, err
	}
	var n int
	if b != nil {
		n, err = s.conn.Write(b[done:])
		n += done
	} else {
		h.Encode(s.wbuf)
		s.iov[0], s.iov[1] = s.wbuf[:transport.HeaderSize], p
		s.bufs = s.iov[:]
		var n64 int64
		n64, err = s.bufs.WriteTo(s.conn)
		n = int(n64)
		s.iov[1], s.bufs = nil, nil // do not keep the caller's buffer
	}
	s.whook.done()
	return n, err
}

// writeNow writes as much of b as the socket takes at once, if ctx is
// still live, and returns how much that was. Errors are left to the armed
// write that follows, which meets them again and reports them as usual.
func (s *stream) writeNow(ctx context.Context, b []byte) int {
	if ctx.Err() != nil {
		return 0
	}
	s.wnow = b
	err := s.raw.Write(s.wnowFn)
	s.wnow = nil
	if err != nil || s.werr != nil || s.wn < 0 {
		return 0
	}
	return s.wn
}

// recv reads the next message into p after checking its header against
// want. It returns how many bytes it read, and the header it got when that
// header did not match (err is then a *transport.MismatchError). start is
// when the wait began (clock.Since): the caller's clock read serves both.
func (s *stream) recv(ctx context.Context, peer int, want transport.Header, p []byte, start time.Duration) (int, error) {
	polled := pollOff
	if len(p) <= pollMax || s.pollAll {
		switch polled = s.poll(transport.HeaderSize+len(p), start); polled {
		case pollAtOnce:
			s.budget.Observe(0)
		case pollFound:
			defer func() { s.budget.Observe(clock.Since() - start) }()
		case pollGaveUp:
			s.woke = -1
			defer s.learnSleep(start)
		}
	}
	var n int
	var err error
	if s.pre == transport.HeaderSize+len(p) {
		// Polling read the whole message: nothing can block, so the
		// context need not be armed.
		n, err = s.recvSmall(peer, want, p)
	} else {
		if err = s.armRead(ctx); err != nil {
			s.rhook.done()
			return s.pre, err // bytes poll took mean the stream is out of step
		}
		if polled == pollGaveUp {
			s.sleep()
		}
		if len(p) <= smallMax {
			n, err = s.recvSmall(peer, want, p)
		} else {
			n, err = s.recvLarge(peer, want, p)
		}
		s.rhook.done()
	}
	if err == errNotice {
		err = s.readNotice(peer)
	}
	return n, err
}

// learnSleep teaches the budget what a receive that gave up polling at
// start waited for its message and, when sleep could tell, what its sleep
// cost (see spin.Budget.ObserveWake).
func (s *stream) learnSleep(start time.Duration) {
	end := clock.Since()
	if s.woke >= 0 {
		end = s.wokeAt
	}
	s.budget.ObserveSlept(end-start, s.woke)
}

// readNotice reads the reason of the abort notice whose header recv found,
// with a deadline of its own (the caller's context may be ending because
// of this very abort). Meanwhile close leaves the socket open, so that a
// failing sibling stream of the same peer cannot cut the reason off; the
// socket closes when the reason is in.
func (s *stream) readNotice(peer int) error {
	s.closeMu.Lock()
	s.noticing.Store(!s.closed)
	s.closeMu.Unlock()
	s.rhook.set(time.Now().Add(time.Second))
	err := s.readAbort(peer, s.noticeHdr, s.notice, len(s.notice), s.known)
	s.closeMu.Lock()
	if s.noticing.Load() && s.closed {
		s.conn.Close()
	}
	s.noticing.Store(false)
	s.closeMu.Unlock()
	return err
}

// close closes the socket, or leaves that to readNotice while it reads a
// notice's reason.
func (s *stream) close() {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.closed = true
	if !s.noticing.Load() {
		s.conn.Close()
	}
}

// recvSmall reads header and payload with as few reads as the socket
// allows, never asking for more than the expected message: bytes past it
// would belong to the next message.
func (s *stream) recvSmall(peer int, want transport.Header, p []byte) (int, error) {
	b := s.rbuf[:transport.HeaderSize+len(p)]
	n := s.pre
	s.pre = 0
	if n < transport.HeaderSize {
		m, err := io.ReadAtLeast(s.conn, b[n:], transport.HeaderSize-n)
		n += m
		if err != nil {
			return n, err
		}
	}
	if ah, ok := isAbortHeader(b); ok {
		s.notice = append(s.notice[:0], b[:n]...)
		s.noticeHdr = ah
		return n, errNotice
	}
	if err := checkHeader(peer, want, b); err != nil {
		return n, err
	}
	// The header matched, so the rest of b is exactly this message's payload.
	m, err := io.ReadFull(s.conn, b[n:])
	n += m
	if err != nil {
		return n, unexpected(err)
	}
	raceSync()
	copy(p, b[transport.HeaderSize:])
	return n, nil
}

func (s *stream) recvLarge(peer int, want transport.Header, p []byte) (int, error) {
	h := s.rbuf[:transport.HeaderSize]
	n, err := io.ReadFull(s.conn, h)
	if err != nil {
		return n, err
	}
	if ah, ok := isAbortHeader(h); ok {
		s.notice = append(s.notice[:0], h[:n]...)
		s.noticeHdr = ah
		return n, errNotice
	}
	if err := checkHeader(peer, want, h); err != nil {
		return n, err
	}
	raceSync()
	m := 0
	if s.pollAll && s.plain && s.raw != nil {
		m = s.readPolled(p)
	}
	m2, err := io.ReadFull(s.conn, p[m:])
	return n + m + m2, unexpected(err)
}

// readPolled reads as much of p as arrives while the gaps between its
// pieces stay within the polling budget, yielding the core between reads,
// and returns how many bytes that was; the read that follows parks for
// the rest. A large message crosses loopback in pieces of up to 64 KiB,
// and a reader that parks between them pays a wake-up for each.
func (s *stream) readPolled(p []byte) int {
	budget := s.budget.Next()
	if budget <= 0 {
		return 0
	}
	done := 0
	last := time.Now()
	for done < len(p) {
		s.rdst, s.rn, s.rerr = p[done:], -1, 0
		err := s.raw.Read(s.readFn)
		s.rdst = nil
		switch {
		case err != nil:
			return done // closed: the parking read reports it
		case s.rn > 0:
			done += s.rn
			last = time.Now()
			continue
		case s.rerr != syscall.EAGAIN:
			return done // the peer hung up, or an error: the parking read reports it
		case time.Since(last) > budget:
			return done
		}
		runtime.Gosched()
		spin.Yield()
	}
	return done
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func checkHeader(peer int, want transport.Header, b []byte) error {
	got, err := transport.Decode(b)
	if err != nil {
		return err
	}
	return want.Check(peer, got)
}
