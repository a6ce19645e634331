package mem

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collkit/collkit/internal/bufpool"
	"github.com/collkit/collkit/transport"
)

// Config sets the faults a Network injects. The zero value is a reliable
// network without delay.
type Config struct {
	// Seed seeds every random choice: the same seed drops and delays the
	// same messages.
	Seed int64
	// Drop is the probability that a message is lost without an error. Its
	// receiver waits until its context ends, or gets the next message from
	// the same peer, which fails the header check when the headers differ.
	// Zero never drops, 1 always.
	Drop float64
	// Delay is the most a message waits before it can be received; each gets
	// a random delay in [0, Delay], never overtaking the one sent before it
	// on the same link. Zero delivers at once.
	Delay time.Duration
}

// Network connects the ranks of one in-process job. Its methods are safe
// for concurrent use, also while Sends and Recvs are in flight.
type Network struct {
	cfg   Config
	ts    []*Transport
	links []*link // links[src*size+dst]; nil where src == dst
}

// Transport is one rank's end of a Network.
type Transport struct {
	net       *Network
	rank      int
	closed    chan struct{} // closed by Close or Kill
	closeOnce sync.Once
	killed    atomic.Bool
	stopped   chan struct{} // closed by Stop
	stopOnce  sync.Once
	reason    atomic.Pointer[string] // set by Abort before it closes

	waitMu sync.Mutex
	waits  []recvWait // by peer: the Recv in progress, or the last one that failed
}

// recvWait is one peer's entry in a stall report.
type recvWait struct {
	since  time.Time // zero: none
	h      transport.Header
	failed bool
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.WaitReporter = (*Transport)(nil)
	_ transport.Pinger       = (*Transport)(nil)
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.Prober       = (*Transport)(nil)
)

// link is one direction of the connection between two ranks.
type link struct {
	src, dst int
	mu       sync.Mutex
	q        []msg // messages waiting, from q[head] on
	head     int
	rng      *rand.Rand // nil when the Config injects no faults
	cut      bool
	pair     *pair
	ready    chan struct{} // one token: a message was queued
}

// pair is what both directions of a connection share.
type pair struct {
	once sync.Once
	cut  chan struct{} // closed by Cut, after both links are marked cut
}

type msg struct {
	h   transport.Header
	buf *bufpool.Buffer // payload; nil when empty
	at  time.Time       // not receivable before; zero without Delay
}

// NewNetwork returns a network of size ranks, all connected. It panics if
// size < 1.
func NewNetwork(size int, cfg Config) *Network {
	if size < 1 {
		panic(fmt.Sprintf("mem: NewNetwork(%d): a network needs at least one rank", size))
	}
	n := &Network{cfg: cfg, ts: make([]*Transport, size), links: make([]*link, size*size)}
	for r := range n.ts {
		n.ts[r] = &Transport{net: n, rank: r, closed: make(chan struct{}), stopped: make(chan struct{}),
			waits: make([]recvWait, size)}
	}
	faults := cfg.Drop > 0 || cfg.Delay > 0
	for a := 0; a < size; a++ {
		for b := a + 1; b < size; b++ {
			p := &pair{cut: make(chan struct{})}
			for _, d := range [][2]int{{a, b}, {b, a}} {
				l := &link{src: d[0], dst: d[1], pair: p, ready: make(chan struct{}, 1)}
				if faults {
					l.rng = rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(d[0])<<32|uint64(d[1])))
				}
				n.links[d[0]*size+d[1]] = l
			}
		}
	}
	return n
}

// Transports returns the ranks' transports; index i is rank i.
func (n *Network) Transports() []transport.Transport {
	ts := make([]transport.Transport, len(n.ts))
	for i, t := range n.ts {
		ts[i] = t
	}
	return ts
}

// Transport returns rank's transport.
func (n *Network) Transport(rank int) *Transport {
	n.mustRank("Transport", rank)
	return n.ts[rank]
}

// Cut breaks the link between ranks a and b in both directions, as if the
// cable were pulled: messages in flight on it are lost, and pending and
// later Sends and Recvs on it fail with a *transport.PeerError wrapping
// transport.ErrPeerGone. Other links are unaffected. Cutting twice is a
// no-op. It panics if a or b is out of range or a == b.
func (n *Network) Cut(a, b int) {
	n.mustRank("Cut", a)
	n.mustRank("Cut", b)
	if a == b {
		panic(fmt.Sprintf("mem: Cut(%d, %d): a rank has no link to itself", a, b))
	}
	for _, l := range []*link{n.link(a, b), n.link(b, a)} {
		l.mu.Lock()
		if !l.cut {
			l.cut = true
			l.drain()
		}
		l.mu.Unlock()
	}
	p := n.link(a, b).pair
	p.once.Do(func() { close(p.cut) })
}

// Kill makes rank die abruptly: its own pending and later operations fail
// with transport.ErrClosed, every link to it is cut (messages to and from it
// are lost), and its peers' operations with it fail with
// transport.ErrPeerGone. It panics if rank is out of range.
func (n *Network) Kill(rank int) {
	n.mustRank("Kill", rank)
	t := n.ts[rank]
	t.killed.Store(true)
	t.Close() // first, so that its own calls report ErrClosed rather than a cut
	for peer := range n.ts {
		if peer != rank {
			n.Cut(rank, peer)
		}
	}
}

// Kill kills this transport's rank in its network (see Network.Kill).
func (t *Transport) Kill() { t.net.Kill(t.rank) }

// Dead lists the peers that were killed (Network.Kill), as a socket
// transport lists the peers whose connections closed without an abort
// notice.
func (t *Transport) Dead() []int {
	var dead []int
	for r, p := range t.net.ts {
		if r != t.rank && p.killed.Load() {
			dead = append(dead, r)
		}
	}
	return dead
}

// Stop freezes rank as SIGSTOP freezes a process: its Sends and Recvs, those
// in progress and later ones, return only when it is closed or killed, and
// it answers no Ping, while messages sent to it still queue (as a stopped
// process's kernel still takes them in). It panics if rank is out of range.
func (n *Network) Stop(rank int) {
	n.mustRank("Stop", rank)
	t := n.ts[rank]
	t.stopOnce.Do(func() { close(t.stopped) })
}

// Close closes every rank's transport. It always returns nil.
func (n *Network) Close() error {
	for _, t := range n.ts {
		t.Close()
	}
	return nil
}

func (n *Network) link(src, dst int) *link { return n.links[src*len(n.ts)+dst] }

func (n *Network) mustRank(op string, rank int) {
	if rank < 0 || rank >= len(n.ts) {
		panic(fmt.Sprintf("mem: %s: rank %d out of range [0, %d)", op, rank, len(n.ts)))
	}
}

// Rank returns this transport's rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the number of ranks in the network.
func (t *Transport) Size() int { return len(t.net.ts) }

var _ transport.Buffered = (*Transport)(nil)

// SendBuffer reports that links queue without bound: Send never waits.
func (t *Transport) SendBuffer() int { return math.MaxInt }

// Close closes this rank's transport: its blocked and later calls fail with
// transport.ErrClosed, and messages waiting for it are discarded. Messages
// it already sent stay receivable; after them its peers' Recvs fail with
// transport.ErrPeerGone, as over a socket closed by its owner. Close always
// returns nil.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		for peer := range t.net.ts {
			if peer == t.rank {
				continue
			}
			l := t.net.link(peer, t.rank)
			l.mu.Lock()
			l.drain()
			l.mu.Unlock()
		}
	})
	return nil
}

// Send queues a copy of p for peer and returns without waiting for the
// receiver. A message the Config drops is discarded without an error.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if isClosed(t.stopped) {
		<-t.closed
	}
	if err := t.check("send", peer); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return t.fail("send", peer, fmt.Errorf("mem: %w", err))
	}
	if uint64(len(p)) > math.MaxUint32 {
		return t.fail("send", peer, fmt.Errorf("mem: a %d-byte message is longer than a header can describe (4 GiB); split it", len(p)))
	}
	h.Len = uint32(len(p))
	buf := getBuf(len(p))
	if buf != nil {
		copy(buf.B, p)
	}
	l := t.net.link(t.rank, peer)
	l.mu.Lock()
	if err := t.linkErr(l, peer); err != nil {
		l.mu.Unlock()
		putBuf(buf)
		return t.fail("send", peer, err)
	}
	m := msg{h: h, buf: buf}
	if l.rng != nil {
		// Always two draws per message, so Drop's choices do not depend on Delay.
		drop := l.rng.Float64() < t.net.cfg.Drop
		u := l.rng.Uint64()
		if drop {
			l.mu.Unlock()
			putBuf(buf)
			return nil
		}
		if d := t.net.cfg.Delay; d > 0 {
			// No need to keep at monotonic: a message waits behind the one
			// ahead of it in the queue whatever its own delay.
			m.at = time.Now().Add(time.Duration(u % uint64(d+1)))
		}
	}
	l.q = append(l.q, m)
	l.mu.Unlock()
	l.poke()
	return nil
}

// Recv waits for the next message from peer and copies it into p.
func (t *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if err := t.check("recv", peer); err != nil {
		return err
	}
	h.Len = uint32(min(uint64(len(p)), math.MaxUint32))
	t.waitMu.Lock()
	t.waits[peer] = recvWait{since: time.Now(), h: h}
	t.waitMu.Unlock()
	err := t.recv(ctx, peer, h, p)
	t.waitMu.Lock()
	if err != nil {
		t.waits[peer].failed = true
	} else {
		t.waits[peer] = recvWait{}
	}
	t.waitMu.Unlock()
	return err
}

func (t *Transport) recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if err := ctx.Err(); err != nil {
		return t.fail("recv", peer, fmt.Errorf("mem: %w", err))
	}
	want := h
	want.Len = uint32(len(p))
	if uint64(len(p)) > math.MaxUint32 {
		return t.fail("recv", peer, fmt.Errorf("mem: a %d-byte buffer is longer than a header can describe (4 GiB); split it", len(p)))
	}
	l := t.net.link(peer, t.rank)
	src := t.net.ts[peer]
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if isClosed(t.stopped) {
			<-t.closed
		}
		l.mu.Lock()
		if err := t.linkErr(l, peer); err != nil {
			l.mu.Unlock()
			return t.fail("recv", peer, err)
		}
		peerClosed := src.closed
		var wait time.Duration
		if l.head < len(l.q) {
			// A closed peer's messages still arrive, so stop watching it.
			peerClosed = nil
			m := l.q[l.head]
			if m.at.IsZero() {
				wait = 0
			} else {
				wait = time.Until(m.at)
			}
			if wait <= 0 {
				l.pop()
				more := l.head < len(l.q)
				l.mu.Unlock()
				if more {
					l.poke() // in case a second receiver waits, against the contract
				}
				return t.deliver(peer, want, m, p)
			}
		} else if isClosed(src.closed) {
			l.mu.Unlock()
			return t.fail("recv", peer, src.goneErr())
		}
		l.mu.Unlock()

		var delayed <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			delayed = timer.C
		}
		select {
		case <-ctx.Done():
			return t.fail("recv", peer, fmt.Errorf("mem: %w", ctx.Err()))
		case <-t.closed:
		case <-l.pair.cut:
		case <-peerClosed:
		case <-l.ready:
		case <-delayed:
		case <-t.stopped:
		}
	}
}

func (t *Transport) deliver(peer int, want transport.Header, m msg, p []byte) error {
	defer putBuf(m.buf)
	if err := want.Check(peer, m.h); err != nil {
		return t.fail("recv", peer, err)
	}
	if m.buf != nil {
		copy(p, m.buf.B)
	}
	return nil
}

// check validates peer and reports a closed transport.
func (t *Transport) check(op string, peer int) error {
	size := len(t.net.ts)
	switch {
	case peer < 0 || peer >= size:
		return t.fail(op, peer, fmt.Errorf("mem: rank %d is not in [0, %d): %w", peer, size, transport.ErrBadPeer))
	case peer == t.rank:
		return t.fail(op, peer, fmt.Errorf("mem: rank %d is this transport's own rank: %w", peer, transport.ErrBadPeer))
	case isClosed(t.closed):
		return t.fail(op, peer, t.closedErr())
	}
	return nil
}

// linkErr reports why l cannot carry messages to or from peer, or nil.
// Called with l.mu held.
func (t *Transport) linkErr(l *link, peer int) error {
	switch {
	case isClosed(t.closed):
		return t.closedErr()
	case t.net.ts[peer].killed.Load():
		return fmt.Errorf("mem: rank %d was killed: %w", peer, transport.ErrPeerGone)
	case l.cut:
		return fmt.Errorf("mem: link %d<->%d was cut: %w", l.src, l.dst, transport.ErrPeerGone)
	case l.src == t.rank && isClosed(t.net.ts[peer].closed):
		return t.net.ts[peer].goneErr()
	}
	return nil
}

// goneErr is what a peer's operation with t gets once t is closed: its
// abort notice, when it aborted.
func (t *Transport) goneErr() error {
	if r := t.reason.Load(); r != nil {
		return &transport.AbortError{Rank: t.rank, Reason: *r}
	}
	return fmt.Errorf("mem: rank %d closed its transport: %w", t.rank, transport.ErrPeerGone)
}

// Abort closes the transport, and its peers' operations with it fail with
// a *transport.AbortError quoting reason (truncated to
// transport.MaxAbortReason bytes) once the messages it sent are received.
func (t *Transport) Abort(reason string) error {
	if len(reason) > transport.MaxAbortReason {
		reason = reason[:transport.MaxAbortReason]
	}
	if !isClosed(t.closed) {
		t.reason.CompareAndSwap(nil, &reason)
	}
	return t.Close()
}

func (t *Transport) closedErr() error {
	if t.killed.Load() {
		return fmt.Errorf("mem: rank %d was killed: %w", t.rank, transport.ErrClosed)
	}
	return fmt.Errorf("mem: rank %d: %w", t.rank, transport.ErrClosed)
}

func (t *Transport) fail(op string, peer int, err error) error {
	return &transport.PeerError{Rank: peer, Op: op, Err: err}
}

// poke wakes a receiver waiting on l.
func (l *link) poke() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// pop removes the head message. Called with l.mu held.
func (l *link) pop() {
	l.q[l.head] = msg{}
	l.head++
	switch {
	case l.head == len(l.q):
		l.q, l.head = l.q[:0], 0
	case l.head >= 64 && 2*l.head >= len(l.q):
		n := copy(l.q, l.q[l.head:])
		clear(l.q[n:])
		l.q, l.head = l.q[:n], 0
	}
}

// drain discards every queued message. Called with l.mu held.
func (l *link) drain() {
	for _, m := range l.q[l.head:] {
		putBuf(m.buf)
	}
	clear(l.q)
	l.q, l.head = l.q[:0], 0
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Waits lists the Recvs in progress, and those that failed since, oldest
// first. Sends never wait on this transport.
func (t *Transport) Waits() []transport.Wait {
	now := time.Now()
	var ws []transport.Wait
	t.waitMu.Lock()
	for peer, w := range t.waits {
		if !w.since.IsZero() {
			ws = append(ws, transport.Wait{Peer: peer, Op: "recv", Header: w.h, Since: w.since, Waited: now.Sub(w.since), Failed: w.failed})
		}
	}
	t.waitMu.Unlock()
	slices.SortStableFunc(ws, func(a, b transport.Wait) int { return a.Since.Compare(b.Since) })
	return ws
}

// Ping returns peer's Waits. A peer that was stopped (Network.Stop), or
// whose link to this rank was cut, answers nothing: Ping then waits for ctx
// and returns an error wrapping transport.ErrNoAnswer. A peer that was
// closed or killed is gone (transport.ErrPeerGone).
func (t *Transport) Ping(ctx context.Context, peer int) ([]transport.Wait, error) {
	if err := t.check("ping", peer); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, t.fail("ping", peer, fmt.Errorf("mem: %w", err)) // no time to answer in
	}
	pt, l := t.net.ts[peer], t.net.link(t.rank, peer)
	gone := func() error {
		return t.fail("ping", peer, fmt.Errorf("mem: rank %d was closed or killed: %w", peer, transport.ErrPeerGone))
	}
	if isClosed(pt.closed) {
		return nil, gone()
	}
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if !cut && !isClosed(pt.stopped) {
		return pt.Waits(), nil
	}
	select {
	case <-ctx.Done():
		return nil, t.fail("ping", peer, fmt.Errorf("mem: %w (%w)", transport.ErrNoAnswer, ctx.Err()))
	case <-pt.closed:
		return nil, gone()
	case <-t.closed:
		return nil, t.fail("ping", peer, t.closedErr())
	}
}

var _ transport.Peeker = (*Transport)(nil)

// Peek shows the header of the next message queued from peer
// (transport.Peeker).
func (t *Transport) Peek(peer int) (transport.Header, bool) {
	if peer < 0 || peer >= t.Size() || peer == t.rank {
		return transport.Header{}, false
	}
	l := t.net.link(peer, t.rank)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head < len(l.q) {
		return l.q[l.head].h, true
	}
	return transport.Header{}, false
}
