package tcp

import (
	"encoding/binary"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/internal/release"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

var (
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.Prober       = (*Transport)(nil)
	_ transport.WaitReporter = (*Transport)(nil)
)

// waitSlot records the Send or the Recv in progress with one peer, for
// stall reports: a few atomic stores per operation, no allocation. Only
// one goroutine at a time sends to (or receives from) a peer, so each slot
// has one writer.
type waitSlot struct {
	since  atomic.Int64  // since clock.Base, plus 1; 0: idle
	failed atomic.Bool   // the operation ended in an error
	seq    atomic.Uint64 // header fields
	count  atomic.Uint64
	comm   atomic.Uint32
	meta   atomic.Uint64 // coll | algo<<8 | dtype<<16 | op<<24 | root<<32
	step   atomic.Uint64 // step | len<<32
}

// begin records h as the operation in progress, begun at now (clock.Since).
func (w *waitSlot) begin(h transport.Header, now time.Duration) {
	// A sequence lock: since is 0 while the fields change, so a snapshot
	// taken meanwhile (a peer's ping) never mixes two operations' fields.
	// Release-only stores: one writer, and the snapshot's loads check
	// since before and after (package release).
	release.Int64(&w.since, 0)
	release.Uint64(&w.seq, h.Seq)
	release.Uint64(&w.count, h.Count)
	release.Uint32(&w.comm, h.Comm)
	release.Uint64(&w.meta, uint64(h.Coll)|uint64(h.Algo)<<8|uint64(h.DType)<<16|uint64(h.Op)<<24|uint64(uint32(h.Root))<<32)
	release.Uint64(&w.step, uint64(h.Step)|uint64(h.Len)<<32)
	release.Bool(&w.failed, false)
	release.Int64(&w.since, int64(now)+1)
}

// end clears the slot after success and keeps it, marked failed, after an
// error.
func (w *waitSlot) end(err error) {
	if err != nil {
		w.failed.Store(true)
		return
	}
	release.Int64(&w.since, 0)
}

func (w *waitSlot) snapshot(peer int, op string, now time.Time) (transport.Wait, bool) {
	since := w.since.Load()
	if since == 0 {
		return transport.Wait{}, false
	}
	meta, step, seq, count, comm, failed := w.meta.Load(), w.step.Load(), w.seq.Load(), w.count.Load(), w.comm.Load(), w.failed.Load()
	if w.since.Load() != since {
		return transport.Wait{}, false // the next operation began meanwhile
	}
	t := clock.Base().Add(time.Duration(since - 1))
	return transport.Wait{
		Peer: peer, Op: op, Since: t, Waited: now.Sub(t), Failed: failed,
		Header: transport.Header{
			Seq: seq, Count: count, Comm: comm,
			Coll: transport.Coll(meta), Algo: uint8(meta >> 8), DType: reduce.DType(meta >> 16), Op: reduce.Op(meta >> 24),
			Root: int32(uint32(meta >> 32)), Step: uint32(step), Len: uint32(step >> 32),
		},
	}, true
}

// Waits lists the Sends and Recvs in progress, and those that ended in an
// error, oldest first.
func (t *Transport) Waits() []transport.Wait {
	if !t.connected.Load() {
		return nil
	}
	now := time.Now()
	var ws []transport.Wait
	for _, pr := range t.peers {
		if pr == nil {
			continue
		}
		if w, ok := pr.sendWait.snapshot(pr.rank, "send", now); ok {
			ws = append(ws, w)
		}
		if w, ok := pr.recvWait.snapshot(pr.rank, "recv", now); ok {
			ws = append(ws, w)
		}
	}
	slices.SortStableFunc(ws, func(a, b transport.Wait) int { return a.Since.Compare(b.Since) })
	return ws
}

// Abort sends every peer whose connection is still in step an abort notice
// with reason on each stream, giving each at most a second (a peer whose
// last Ping went unanswered: 10 ms, without waiting for the notice to be
// acknowledged), and then closes the transport. Peers receiving from this
// rank get a *transport.AbortError that quotes reason instead of a bare
// "connection lost".
func (t *Transport) Abort(reason string) error {
	if t.connected.Load() && !t.closed.Load() {
		dl := time.Now().Add(time.Second)
		var sent []*stream
		for _, pr := range t.peers {
			if pr == nil || pr.broken.Load() {
				continue
			}
			// A peer that did not answer a ping reads nothing either: leave
			// it the notice only if the socket takes it at once.
			silent := pr.silent.Load()
			pdl := dl
			if silent {
				pdl = time.Now().Add(10 * time.Millisecond)
			}
			// On every stream: a peer receiving the pieces of a message
			// reads them all, and whichever stream it reads must carry the
			// reason rather than a bare hang-up.
			for _, s := range pr.streams {
				if s.notify(reason, pdl) && !silent {
					sent = append(sent, s)
				}
			}
		}
		// Closing a socket with unread input resets the connection and
		// drops what it has not sent yet: give the notices up to half a
		// second to be acknowledged first.
		linger := time.Now().Add(500 * time.Millisecond)
		for _, s := range sent {
			s.linger(linger)
		}
	}
	return t.Close()
}

// Dead lists the peers that died: their connections were closed by the
// other side without an abort notice, as the kernel does when a process
// exits or is killed. It peeks at the sockets without reading or blocking.
func (t *Transport) Dead() []int {
	if !t.connected.Load() {
		return nil
	}
	var dead []int
	for _, pr := range t.peers {
		if pr == nil {
			continue
		}
		if pr.dead.Load() {
			dead = append(dead, pr.rank)
			continue
		}
		if pr.broken.Load() {
			continue // closed here; fail looked before it closed them
		}
		if _, died := pr.inspect(); died {
			dead = append(dead, pr.rank)
		}
	}
	return dead
}

type peerState int

const (
	peerAlive   peerState = iota // nothing to read, or data that is not a notice
	peerDied                     // closed by the other side with nothing left unread
	peerAborted                  // an abort notice is waiting to be read
)

// peekMax bounds how much unread input peek looks through for a notice.
const peekMax = 4 << 20

// peek looks at the unread bytes of s without consuming them. Messages this
// rank has not read yet may stand before a notice (an aborting peer sends it
// after the last whole message), so it walks the message headers of what
// has arrived. For an abort notice it returns the reason. A peer that shut
// its side (POLLRDHUP, which the kernel reports even with input unread)
// with no notice among what arrived died.
//
// buf holds the input looked at; it is made only when there is input to
// walk, one byte larger than the input (at most peekMax bytes), and kept
// for the caller's next peek. A buffer of peekMax for every peer cost a
// failing rank tens of milliseconds per peer on a busy machine (4 MiB of
// fresh pages to fault in and clear, to look at a few hundred bytes).
func (s *stream) peek(buf *[]byte) (peerState, string) {
	if s.raw == nil {
		return peerAlive, ""
	}
	state, reason := peerAlive, ""
	// A notice may still be arriving: look again, briefly, until its
	// reason is whole.
	for giveUp := time.Now().Add(100 * time.Millisecond); ; runtime.Gosched() {
		partial := false
		state, reason = peerAlive, ""
		err := s.raw.Control(func(fd uintptr) {
			var one [1]byte
			n, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case n == 0 && err == nil, err == syscall.ECONNRESET:
				state = peerDied
				return
			case n <= 0:
				return // nothing arrived: alive as far as anyone can tell
			}
			// One byte more than has arrived, so that a short peek shows
			// that it saw everything (for shutDown below).
			size := min(unread(fd)+1, peekMax)
			if cap(*buf) < size {
				*buf = make([]byte, size)
			}
			buf := (*buf)[:size]
			n, _, err = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err != nil || n <= 0 {
				return
			}
			off := 0
			for off+transport.HeaderSize <= n {
				h, derr := transport.Decode(buf[off:n])
				if derr != nil {
					// Not a message boundary: a receive cut off inside a
					// message left the rest of it unread. A notice is the
					// last thing a peer sends: look for one that ends the input.
					if off = lastNotice(buf[:n], off); off < 0 {
						break
					}
					continue
				}
				if h.Coll == transport.CollAbort {
					state = peerAborted
					start := off + transport.HeaderSize
					end := start + min(int(h.Len), transport.MaxAbortReason)
					reason = string(buf[start:min(n, end)])
					partial = n < end
					return
				}
				off += transport.HeaderSize + int(h.Len)
			}
			if n < len(buf) && shutDown(fd) {
				state = peerDied // everything it sent is here, and no notice
			}
		})
		if err != nil {
			return peerAlive, ""
		}
		if !partial || time.Now().After(giveUp) {
			return state, reason
		}
	}
}

// inspect peeks at every stream of pr. A notice on any stream, or one read
// already, means pr aborted (its reason is kept for readAbort, in case
// this rank closes a stream while reading a notice on it); otherwise pr
// died if any stream shows it gone.
func (pr *peer) inspect() (aborted *transport.AbortError, died bool) {
	var buf []byte // shared by the streams' peeks
	// A stream reading a notice has consumed its header: wait (its read has
	// a deadline of a second) for the reason it reads.
	for _, s := range pr.streams {
		for end := time.Now().Add(2 * time.Second); s.noticing.Load() && pr.notice.Load() == nil && time.Now().Before(end); {
			runtime.Gosched()
		}
	}
	if r := pr.notice.Load(); r != nil {
		return &transport.AbortError{Rank: pr.rank, Reason: *r}, false // read or seen already
	}
	for _, s := range pr.streams {
		switch st, reason := s.peek(&buf); st {
		case peerAborted:
			pr.notice.Store(&reason)
			return &transport.AbortError{Rank: pr.rank, Reason: reason}, false
		case peerDied:
			died = true
		}
	}
	return nil, died
}

// classifyGone is called when the connection to pr ended under an
// operation: an abort notice still unread on any stream turns the error
// into the peer's own reason; otherwise pr died.
func (pr *peer) classifyGone() *transport.AbortError {
	if ae, _ := pr.inspect(); ae != nil {
		return ae
	}
	pr.dead.Store(true)
	return nil
}

// readAbort reads the rest of an abort notice whose header h is in b, with
// the first got bytes of b read, and returns the peer's error.
func (s *stream) readAbort(peer int, h transport.Header, b []byte, got int, known *atomic.Pointer[string]) error {
	if h.Len > transport.MaxAbortReason {
		return errors.Join(transport.ErrBadFrame, errors.New("abort notice too long"))
	}
	want := transport.HeaderSize + int(h.Len)
	var buf [transport.HeaderSize + transport.MaxAbortReason]byte
	n := copy(buf[:], b[:min(got, want)])
	for n < want {
		m, err := s.conn.Read(buf[n:want])
		n += m
		if err != nil {
			break
		}
	}
	if n == want {
		reason := string(buf[transport.HeaderSize:n])
		known.CompareAndSwap(nil, &reason)
		return &transport.AbortError{Rank: peer, Reason: reason}
	}
	// Cut short (the peer went before the reason was whole, or this rank
	// closed the stream): the peer sent the same reason on its other
	// streams, where inspect may have read it.
	if r := known.Load(); r != nil {
		return &transport.AbortError{Rank: peer, Reason: *r}
	}
	return &transport.AbortError{Rank: peer, Reason: string(buf[transport.HeaderSize:n]) + " (cut off)"}
}

// errNotice tells stream.recv that an abort notice arrived in place of the
// message; it then reads the notice.
var errNotice = errors.New("abort notice")

// lastNotice returns the offset, at from or after it, of an abort notice
// header whose notice ends the input b (or would, once the rest of its
// reason arrives), or -1 when there is none. A message's payload that
// held such a header by chance would also have to end where the input
// does.
func lastNotice(b []byte, from int) int {
	for off := from; off+transport.HeaderSize <= len(b); off++ {
		if h, ok := isAbortHeader(b[off:]); ok && off+transport.HeaderSize+int(h.Len) >= len(b) {
			return off
		}
	}
	return -1
}

// isAbortHeader reports whether b starts with the header of an abort notice.
func isAbortHeader(b []byte) (transport.Header, bool) {
	if len(b) < transport.HeaderSize || binary.LittleEndian.Uint16(b) != 0xC011 {
		return transport.Header{}, false
	}
	h, err := transport.Decode(b)
	return h, err == nil && h.Coll == transport.CollAbort
}

// breakOff closes pr's connections after a hard error on one piece of a
// message, first noting whether the peer died: once the sockets are closed
// here, nothing is left to look at.
func (pr *peer) breakOff(err error) {
	if peerGone(err) {
		pr.classifyGone()
	}
	pr.closeConns()
}

var (
	_ transport.Peeker       = (*Transport)(nil)
	_ transport.NoticePeeker = (*Transport)(nil)
)

// Peek shows the header of the next message from peer when its first bytes
// have arrived and no Recv from peer is in progress (transport.Peeker). It
// looks at the socket without consuming anything, so never over TLS, whose
// records cannot be read that way.
func (t *Transport) Peek(peer int) (transport.Header, bool) {
	pr := t.idlePeer(peer)
	if pr == nil {
		return transport.Header{}, false
	}
	return pr.streams[0].peekHeader()
}

// idlePeer is peer's connection when it is up and no Recv reads it (a Recv
// finds a notice itself), or nil.
func (t *Transport) idlePeer(peer int) *peer {
	if !t.connected.Load() || t.closed.Load() || peer < 0 || peer >= len(t.peers) || peer == t.cfg.Rank {
		return nil
	}
	pr := t.peers[peer]
	if pr == nil || pr.broken.Load() || pr.recvWait.since.Load() != 0 {
		return nil
	}
	return pr
}

// PeekNotice returns peer's abort notice when one lies unread (see
// transport.NoticePeeker): the next message on the connection is one, or
// the reason was read already.
func (t *Transport) PeekNotice(peer int) (*transport.AbortError, bool) {
	pr := t.idlePeer(peer)
	if pr == nil {
		return nil, false
	}
	if r := pr.notice.Load(); r != nil {
		return &transport.AbortError{Rank: pr.rank, Reason: *r}, true
	}
	h, ok := t.Peek(peer)
	if !ok || h.Coll != transport.CollAbort {
		return nil, false
	}
	ae, _ := pr.inspect()
	return ae, ae != nil
}
