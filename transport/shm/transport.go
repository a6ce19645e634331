//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/collkit/collkit/internal/spin"
	"github.com/collkit/collkit/transport"
)

var (
	_ transport.Transport        = (*Transport)(nil)
	_ transport.Buffered         = (*Transport)(nil)
	_ transport.NativeAllReducer = (*Transport)(nil)
	_ transport.Aborter          = (*Transport)(nil)
)

// errClosed stops a wait because this transport was closed.
var errClosed = errors.New("closed")

// Transport is one rank's shared-memory links to every other rank of a job
// on the same host. It is made by New, connected by Connect and released by
// Close.
type Transport struct {
	cfg Config
	lay layout

	// mu is held shared by every operation that touches the mappings and
	// exclusively by Close to unmap them once those operations are out.
	mu        sync.RWMutex
	setup     sync.Mutex // Connect's state
	started   bool
	cancel    context.CancelFunc // of a Connect in progress
	connected atomic.Bool
	closed    atomic.Bool

	segs  []*segment // by rank; segs[Rank] is this rank's own
	peers []*peer    // by rank; nil for this rank
	name  string     // job token in segment names

	native    native
	streaming bool // chooseStores's choice, made in Connect

	// Which of this rank's wait records are taken, and which of those
	// hold a wait that failed (ping.go).
	waitUsed, waitFailed atomic.Uint32

	exits exitWatch // the peers' processes (exits.go)
}

// peer is the two rings with one other rank.
type peer struct {
	rank int
	seg  *segment // the peer's segment
	pid  int
	// checkPid is false when the peer's pid is not visible from here
	// (another pid namespace), so liveness rests on its closed flag.
	checkPid bool
	in, out  ring // in: peer -> this rank, in this rank's segment; out: in the peer's
	// How long waits for the peer's data (in) and for room in its ring
	// (out) poll before sleeping.
	inWait, outWait spin.Budget

	broken  atomic.Bool
	exited  atomic.Bool // its process exited (exits.go)
	reading atomic.Bool // a Recv is reading in: Peek keeps out
	errMu   sync.Mutex
	err     error
}

// New checks cfg and returns an unconnected Transport. It does no I/O.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Transport{cfg: cfg, lay: layout{size: cfg.Size, ringBytes: cfg.RingBytes, nativeBytes: cfg.NativeBytes}}, nil
}

// Rank is this process's rank.
func (t *Transport) Rank() int { return t.cfg.Rank }

// Size is the number of ranks in the job.
func (t *Transport) Size() int { return t.cfg.Size }

// SendBuffer is how many payload bytes a Send may leave unreceived and still
// return: three quarters of a ring, the rest kept for message headers.
func (t *Transport) SendBuffer() int { return t.cfg.RingBytes / 4 * 3 }

// String describes t for logs.
func (t *Transport) String() string {
	return "shm rank " + strconv.Itoa(t.cfg.Rank) + "/" + strconv.Itoa(t.cfg.Size) + " job " + t.name
}

// Close marks this rank closed in its segment, wakes every rank waiting on
// it and every local wait, waits for operations in progress to return
// (with errors wrapping transport.ErrClosed), and unmaps the segments. Its
// own segment file, if Connect has not removed it yet, is removed. Safe to
// call more than once.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.setup.Lock()
	if t.cancel != nil {
		t.cancel()
	}
	t.setup.Unlock()
	if t.connected.Load() {
		own := t.segs[t.cfg.Rank]
		own.u32(offClosed).Store(1)
		forceWake(own.u32(offBwait))
		for _, pr := range t.peers {
			if pr != nil {
				forceWake(pr.in.cwait)
				forceWake(pr.in.pwait)
				forceWake(pr.out.cwait)
				forceWake(pr.out.pwait)
				forceWake(pr.seg.u32(offBwait))
			}
		}
	}
	// Operations in progress have returned: native all-reduces (which
	// hold only native.mu), then messages.
	t.native.mu.Lock()
	defer t.native.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopExits() // it wakes waiters in the segments
	var errs []error
	for _, s := range t.segs {
		if s != nil {
			errs = append(errs, s.unmap())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shm: rank %d close: %w", t.cfg.Rank, err)
	}
	return nil
}

// acquire checks that an operation with rank r may start and holds t.mu
// shared for it; release with t.mu.RUnlock when it returns nil.
func (t *Transport) acquire(op string, r int) (*peer, error) {
	switch {
	case r < 0 || r >= t.cfg.Size || r == t.cfg.Rank:
		return nil, &transport.PeerError{Rank: r, Op: op, Err: fmt.Errorf(
			"%w: rank %d is this rank or outside a job of %d ranks (this is rank %d)",
			transport.ErrBadPeer, r, t.cfg.Size, t.cfg.Rank)}
	case t.closed.Load():
		return nil, &transport.PeerError{Rank: r, Op: op, Err: transport.ErrClosed}
	case !t.connected.Load():
		return nil, &transport.PeerError{Rank: r, Op: op, Err: ErrNotConnected}
	}
	t.mu.RLock()
	if t.closed.Load() {
		t.mu.RUnlock()
		return nil, &transport.PeerError{Rank: r, Op: op, Err: transport.ErrClosed}
	}
	pr := t.peers[r]
	if pr.broken.Load() {
		t.mu.RUnlock()
		return nil, pr.brokenErr(op)
	}
	return pr, nil
}

func (pr *peer) addr() string { return "pid " + strconv.Itoa(pr.pid) }

func (pr *peer) brokenErr(op string) error {
	pr.errMu.Lock()
	defer pr.errMu.Unlock()
	return &transport.PeerError{Rank: pr.rank, Addr: pr.addr(), Op: op,
		Err: fmt.Errorf("link unusable after an earlier error; close the transport: %w", pr.err)}
}

// Abort leaves reason (cut to transport.MaxAbortReason bytes) in this
// rank's segment, where a peer that finds it closed reads it, and closes.
func (t *Transport) Abort(reason string) error {
	if t.connected.Load() && !t.closed.Load() {
		own := t.segs[t.cfg.Rank]
		reason = reason[:min(len(reason), transport.MaxAbortReason)]
		copy(own.mem[offReason+4:], reason)
		raceSync()
		own.u32(offReason).Store(uint32(len(reason))) // before Close sets the closed flag
	}
	return t.Close()
}

// abortReason is what the owner of s said when it aborted, if it did.
func (s *segment) abortReason() (string, bool) {
	n := int(s.u32(offReason).Load())
	if n == 0 || n > transport.MaxAbortReason {
		return "", false
	}
	raceSync()
	return string(s.mem[offReason+4 : offReason+4+n]), true
}

// gone is the error of a peer that closed or died, or nil while it lives.
// live asks for the (slower) process check too.
func (pr *peer) gone(live bool) error {
	if pr.seg.closed() {
		if reason, ok := pr.seg.abortReason(); ok {
			return &transport.AbortError{Rank: pr.rank, Reason: reason}
		}
		return fmt.Errorf("%w: rank %d (pid %d) closed its transport: it finished, or aborted after an error of its own",
			transport.ErrPeerGone, pr.rank, pr.pid)
	}
	if pr.exited.Load() || live && pr.checkPid && !alive(pr.pid) {
		return fmt.Errorf("%w: rank %d (pid %d) exited without closing its transport: it crashed or was killed",
			transport.ErrPeerGone, pr.rank, pr.pid)
	}
	return nil
}

var _ transport.Prober = (*Transport)(nil)

// Dead lists the peers whose process is gone without closing its
// transport, or that closed it without an abort notice (as a socket
// transport sees a connection closed without one). A peer that aborted
// and then exited is not dead: its notice says why it gave up (and the
// exit watch sees its exit at once, while this rank may still be
// diagnosing the same failure).
func (t *Transport) Dead() []int {
	if !t.connected.Load() {
		return nil
	}
	var dead []int
	for _, pr := range t.peers {
		if pr == nil {
			continue
		}
		_, aborted := pr.seg.abortReason()
		closed := pr.seg.closed()
		if closed && !aborted || !closed && (pr.exited.Load() || pr.checkPid && !alive(pr.pid)) {
			dead = append(dead, pr.rank)
		}
	}
	return dead
}

// failed turns the error that stopped an operation into the caller's,
// marking the link broken when the byte stream may be out of step.
func (t *Transport) failed(ctx context.Context, pr *peer, op string, moved bool, err error) error {
	perr := &transport.PeerError{Rank: pr.rank, Addr: pr.addr(), Op: op, Err: err}
	switch {
	case errors.Is(err, errClosed) || t.closed.Load():
		perr.Err = transport.ErrClosed
		return perr
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		if !moved {
			return perr // nothing moved: the link is still in step
		}
	}
	pr.errMu.Lock()
	if pr.err == nil {
		pr.err = perr
	}
	pr.errMu.Unlock()
	pr.broken.Store(true)
	return perr
}

// Send copies h and p into the ring to rank peer, waiting for room as the
// peer drains it; a message larger than the ring streams through it.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	pr, err := t.acquire("send", peer)
	if err != nil {
		return err
	}
	defer t.mu.RUnlock()
	if uint64(len(p)) > math.MaxUint32 {
		return &transport.PeerError{Rank: peer, Addr: pr.addr(), Op: "send", Err: fmt.Errorf(
			"message of %d bytes is larger than a header can describe (4 GiB); split it", len(p))}
	}
	if err := pr.gone(false); err != nil {
		return t.failed(ctx, pr, "send", false, err)
	}
	h.Len = uint32(len(p))
	var hb [transport.HeaderSize]byte
	h.Encode(hb[:])
	if moved, err := t.write(ctx, pr, &h, hb[:], p); err != nil {
		return t.failed(ctx, pr, "send", moved, err)
	}
	return nil
}

// Recv takes the next message from rank peer's ring, checks its header and
// copies the payload into p.
func (t *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	pr, err := t.acquire("recv", peer)
	if err != nil {
		return err
	}
	defer t.mu.RUnlock()
	if uint64(len(p)) > math.MaxUint32 {
		return &transport.PeerError{Rank: peer, Addr: pr.addr(), Op: "recv", Err: fmt.Errorf(
			"message of %d bytes is larger than a header can describe (4 GiB); split it", len(p))}
	}
	h.Len = uint32(len(p))
	pr.reading.Store(true)
	moved, err := t.read(ctx, pr, h, p)
	pr.reading.Store(false)
	if err != nil {
		return t.failed(ctx, pr, "recv", moved, err)
	}
	return nil
}

var _ transport.Peeker = (*Transport)(nil)

// Peek shows the header of the next message in peer's ring when it has
// arrived whole and no Recv from peer is reading (transport.Peeker).
func (t *Transport) Peek(peer int) (transport.Header, bool) {
	pr, err := t.acquire("peek", peer)
	if err != nil {
		return transport.Header{}, false
	}
	defer t.mu.RUnlock()
	return pr.peek()
}

// peek is Peek for a caller that holds t.mu.
func (pr *peer) peek() (transport.Header, bool) {
	r := &pr.in
	tail := r.tail.Load()
	if pr.reading.Load() {
		return transport.Header{}, false
	}
	head := r.head.Load()
	for head-tail >= transport.HeaderSize {
		var hb [transport.HeaderSize]byte
		r.get(tail, hb[:])
		h, err := transport.Decode(hb[:])
		if err != nil || h.Coll != transport.CollPad {
			return h, err == nil
		}
		tail += transport.HeaderSize + uint64(h.Len) // a pad: the message follows (see ring.rewind)
	}
	return transport.Header{}, false
}
