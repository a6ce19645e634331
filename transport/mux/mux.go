package mux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collkit/collkit/internal/bufpool"
	"github.com/collkit/collkit/transport"
)

// Envelope layout: the view's header, the communicator id, the kind.
const (
	envSize   = 48
	kindData  = 0
	kindClose = 1
	// envComm marks the parent messages of a Mux, so that a peer that
	// sends outside the Mux gets a mismatch error rather than garbage.
	envComm = 0xC011_3E55
)

// closeNotifyTimeout bounds how long Close waits to tell each member.
const closeNotifyTimeout = time.Second

var (
	envHeader     = transport.Header{Comm: envComm, Root: -1}
	payloadHeader = transport.Header{Comm: envComm, Root: -1, Step: 1}
)

// Mux shares a parent transport among views. Its methods are safe for
// concurrent use.
type Mux struct {
	parent transport.Transport
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	peers []peerState // by parent rank

	mu      sync.Mutex
	inboxes map[uint32]*inbox
}

type peerState struct {
	sendMu     sync.Mutex // one envelope and payload at a time
	sendBroken error      // an envelope went without its payload; guarded by sendMu
	failed     atomic.Pointer[error]
}

// New starts a Mux over parent: one goroutine per peer that reads from it
// until Close, or until the parent fails.
func New(parent transport.Transport) *Mux {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mux{parent: parent, ctx: ctx, cancel: cancel,
		peers: make([]peerState, parent.Size()), inboxes: map[uint32]*inbox{}}
	for q := range parent.Size() {
		if q != parent.Rank() {
			m.wg.Add(1)
			go m.read(q)
		}
	}
	return m
}

// Close stops the readers and fails every view's receives. It does not close
// the parent; it always returns nil.
func (m *Mux) Close() error {
	m.cancel()
	m.wg.Wait()
	return nil
}

// inbox holds what has arrived for one communicator id, whether or not its
// view is open yet.
type inbox struct {
	mu     sync.Mutex
	queue  map[int][]message // by parent rank
	posted map[int]*posted
	gone   map[int]bool // the peer closed its view
	closed bool         // this rank closed its view
	open   bool
}

type message struct {
	h   transport.Header
	buf *bufpool.Buffer
}

// posted is a receive waiting for its message.
type posted struct {
	want transport.Header
	p    []byte
	done chan error
}

func (m *Mux) inbox(comm uint32) *inbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	ib := m.inboxes[comm]
	if ib == nil {
		ib = &inbox{queue: map[int][]message{}, posted: map[int]*posted{}, gone: map[int]bool{}}
		m.inboxes[comm] = ib
	}
	return ib
}

func (m *Mux) failure(q int) error {
	if e := m.peers[q].failed.Load(); e != nil {
		return *e
	}
	return nil
}

// read receives every message from parent rank q and routes it.
func (m *Mux) read(q int) {
	defer m.wg.Done()
	var env [envSize]byte
	for {
		err := m.parent.Recv(m.ctx, q, envHeader, env[:])
		if err == nil {
			err = m.route(q, env[:])
		}
		if err != nil {
			if m.ctx.Err() != nil {
				err = fmt.Errorf("mux: %w", transport.ErrClosed)
			}
			m.fail(q, err)
			return
		}
	}
}

// decodeEnvelope reads an envelope off the network.
func decodeEnvelope(env []byte) (h transport.Header, comm uint32, kind byte, err error) {
	if len(env) != envSize {
		return h, 0, 0, fmt.Errorf("%w: envelope of %d bytes, want %d", transport.ErrBadFrame, len(env), envSize)
	}
	if h, err = transport.Decode(env[:transport.HeaderSize]); err != nil {
		return h, 0, 0, err
	}
	comm, kind = binary.LittleEndian.Uint32(env[40:]), env[44]
	if kind != kindData && kind != kindClose || env[45] != 0 || env[46] != 0 || env[47] != 0 {
		return h, 0, 0, fmt.Errorf("%w: envelope kind %d", transport.ErrBadFrame, kind)
	}
	return h, comm, kind, nil
}

func (m *Mux) route(q int, env []byte) error {
	h, comm, kind, err := decodeEnvelope(env)
	if err != nil {
		return fmt.Errorf("mux: envelope from rank %d: %w", q, err)
	}
	ib := m.inbox(comm)
	if kind == kindClose {
		ib.mu.Lock()
		ib.gone[q] = true
		pr := ib.posted[q]
		if len(ib.queue[q]) == 0 && pr != nil {
			delete(ib.posted, q)
			pr.done <- fmt.Errorf("mux: the peer closed its communicator %d: %w", comm, transport.ErrPeerGone)
		}
		ib.mu.Unlock()
		return nil
	}
	ib.mu.Lock()
	pr := ib.posted[q]
	direct := pr != nil && len(ib.queue[q]) == 0 && pr.want == h
	if direct {
		delete(ib.posted, q)
	}
	ib.mu.Unlock()
	if direct {
		err := m.payload(q, pr.p)
		pr.done <- err
		return err
	}
	var buf *bufpool.Buffer
	if h.Len > 0 {
		buf = bufpool.Get(int(h.Len))
		if err := m.payload(q, buf.B); err != nil {
			bufpool.Put(buf)
			return err
		}
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.closed {
		bufpool.Put(buf)
		return nil
	}
	ib.queue[q] = append(ib.queue[q], message{h, buf})
	if pr := ib.posted[q]; pr != nil {
		delete(ib.posted, q)
		pr.done <- ib.take(q, pr.want, pr.p)
	}
	return nil
}

func (m *Mux) payload(q int, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	return m.parent.Recv(m.ctx, q, payloadHeader, p)
}

// take delivers the first queued message from q into p. The caller holds
// ib.mu.
func (ib *inbox) take(q int, want transport.Header, p []byte) error {
	msg := ib.queue[q][0]
	ib.queue[q][0] = message{}
	ib.queue[q] = ib.queue[q][1:]
	defer bufpool.Put(msg.buf)
	if msg.h != want {
		return &transport.MismatchError{Peer: q, Want: want, Got: msg.h}
	}
	if msg.buf != nil {
		copy(p, msg.buf.B)
	}
	return nil
}

// fail records that the parent failed with q and fails the receives that
// wait for it.
func (m *Mux) fail(q int, err error) {
	m.peers[q].failed.CompareAndSwap(nil, &err)
	m.mu.Lock()
	ibs := make([]*inbox, 0, len(m.inboxes))
	for _, ib := range m.inboxes {
		ibs = append(ibs, ib)
	}
	m.mu.Unlock()
	for _, ib := range ibs {
		ib.mu.Lock()
		if pr := ib.posted[q]; pr != nil && len(ib.queue[q]) == 0 {
			delete(ib.posted, q)
			pr.done <- err
		}
		ib.mu.Unlock()
	}
}

// Open returns this rank's view of communicator comm over the parent ranks
// ranks, listed in view rank order. Every member opens the same comm with the
// same ranks; comm must not be open already on this rank. Messages that
// members sent before this rank opened the view wait for it.
func (m *Mux) Open(comm uint32, ranks []int) (*Transport, error) {
	size, me := m.parent.Size(), m.parent.Rank()
	rank := -1
	seen := map[int]bool{}
	for i, pr := range ranks {
		if pr < 0 || pr >= size || seen[pr] {
			return nil, fmt.Errorf("mux: communicator %d: ranks[%d] is %d, not a distinct rank of the parent (0 to %d)", comm, i, pr, size-1)
		}
		seen[pr] = true
		if pr == me {
			rank = i
		}
	}
	if rank < 0 {
		return nil, fmt.Errorf("mux: communicator %d: ranks %v do not include this process (parent rank %d)", comm, ranks, me)
	}
	ib := m.inbox(comm)
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ib.open || ib.closed {
		return nil, fmt.Errorf("mux: communicator id %d is already in use on parent rank %d; every communicator sharing connections needs its own id", comm, me)
	}
	ib.open = true
	return &Transport{m: m, ib: ib, comm: comm, ranks: append([]int(nil), ranks...), rank: rank}, nil
}

// Transport is one rank's view of a communicator on a Mux. Its methods are
// safe for concurrent use; receives from one peer must not overlap.
type Transport struct {
	m     *Mux
	ib    *inbox
	comm  uint32
	ranks []int
	rank  int
	once  sync.Once
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Buffered  = (*Transport)(nil)
)

// Rank is this rank's index in the view's ranks.
func (v *Transport) Rank() int { return v.rank }

// Size is the number of ranks in the view.
func (v *Transport) Size() int { return len(v.ranks) }

// Comm is the view's communicator id.
func (v *Transport) Comm() uint32 { return v.comm }

// ParentRank returns the parent rank of view rank r.
func (v *Transport) ParentRank(r int) int { return v.ranks[r] }

// SendBuffer reports the parent's send buffering: receivers always drain
// into their queues, so a send waits only for the parent itself.
func (v *Transport) SendBuffer() int {
	if b, ok := v.m.parent.(transport.Buffered); ok {
		return b.SendBuffer()
	}
	return 0
}

var errClosed = fmt.Errorf("mux: %w", transport.ErrClosed)

func (v *Transport) peer(op string, peer int) (int, error) {
	if peer < 0 || peer >= len(v.ranks) || peer == v.rank {
		return 0, &transport.PeerError{Rank: peer, Op: op, Err: fmt.Errorf(
			"mux: rank %d is this rank or not in [0, %d): %w", peer, len(v.ranks), transport.ErrBadPeer)}
	}
	return v.ranks[peer], nil
}

// wrap names the view peer in an error about parent rank q.
func (v *Transport) wrap(op string, peer, q int, err error) error {
	addr := "parent rank " + strconv.Itoa(q)
	var pe *transport.PeerError
	if errors.As(err, &pe) && pe.Rank == q {
		if pe.Addr != "" {
			addr += ", " + pe.Addr
		}
		err = pe.Err
	}
	var me *transport.MismatchError
	if errors.As(err, &me) && me.Peer == q {
		err = &transport.MismatchError{Peer: peer, Want: me.Want, Got: me.Got}
	}
	return &transport.PeerError{Rank: peer, Addr: addr, Op: op, Err: err}
}

// Send sends p to view rank peer.
func (v *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	q, err := v.peer("send", peer)
	if err != nil {
		return err
	}
	if v.isClosed() {
		return v.wrap("send", peer, q, errClosed)
	}
	if err := v.send(ctx, q, h, p, kindData); err != nil {
		return v.wrap("send", peer, q, err)
	}
	return nil
}

func (v *Transport) send(ctx context.Context, q int, h transport.Header, p []byte, kind byte) error {
	if len(p) > 1<<32-1 {
		return fmt.Errorf("mux: a %d-byte message is longer than a header can describe (4 GiB); split it", len(p))
	}
	h.Len = uint32(len(p))
	var env [envSize]byte
	h.Encode(env[:])
	binary.LittleEndian.PutUint32(env[40:], v.comm)
	env[44] = kind
	ps := &v.m.peers[q]
	ps.sendMu.Lock()
	defer ps.sendMu.Unlock()
	if ps.sendBroken != nil {
		return ps.sendBroken
	}
	if err := v.m.parent.Send(ctx, q, envHeader, env[:]); err != nil {
		return err
	}
	if len(p) > 0 {
		if err := v.m.parent.Send(ctx, q, payloadHeader, p); err != nil {
			ps.sendBroken = fmt.Errorf("mux: connection out of step after a message was cut short: %w", err)
			return err
		}
	}
	return nil
}

// Recv receives the next message of this view from view rank peer.
func (v *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	q, err := v.peer("recv", peer)
	if err != nil {
		return err
	}
	if len(p) > 1<<32-1 {
		return v.wrap("recv", peer, q, fmt.Errorf("mux: a %d-byte message is longer than a header can describe (4 GiB); split it", len(p)))
	}
	h.Len = uint32(len(p))
	ib := v.ib
	ib.mu.Lock()
	switch {
	case ib.closed:
		ib.mu.Unlock()
		return v.wrap("recv", peer, q, errClosed)
	case len(ib.queue[q]) > 0:
		err := ib.take(q, h, p)
		ib.mu.Unlock()
		if err != nil {
			return v.wrap("recv", peer, q, err)
		}
		return nil
	case ib.gone[q]:
		ib.mu.Unlock()
		return v.wrap("recv", peer, q, fmt.Errorf("mux: the peer closed its communicator %d: %w", v.comm, transport.ErrPeerGone))
	case ib.posted[q] != nil:
		ib.mu.Unlock()
		return v.wrap("recv", peer, q, fmt.Errorf("mux: a receive from this peer is already waiting; receives from one peer must not overlap"))
	}
	if err := v.m.failure(q); err != nil {
		ib.mu.Unlock()
		return v.wrap("recv", peer, q, err)
	}
	pr := &posted{want: h, p: p, done: make(chan error, 1)}
	ib.posted[q] = pr
	ib.mu.Unlock()
	select {
	case err = <-pr.done:
	case <-ctx.Done():
		ib.mu.Lock()
		mine := ib.posted[q] == pr
		if mine {
			delete(ib.posted, q)
		}
		ib.mu.Unlock()
		if mine {
			err = fmt.Errorf("mux: %w", ctx.Err())
		} else {
			err = <-pr.done // a reader is writing into p: wait for it
		}
	}
	if err != nil {
		return v.wrap("recv", peer, q, err)
	}
	return nil
}

func (v *Transport) isClosed() bool {
	v.ib.mu.Lock()
	defer v.ib.mu.Unlock()
	return v.ib.closed
}

// Close fails this view's pending and later calls with transport.ErrClosed
// and tells its members, briefly waiting for each. It does not close the
// parent or other views. It always returns nil.
func (v *Transport) Close() error {
	v.once.Do(func() {
		ib := v.ib
		ib.mu.Lock()
		ib.closed = true
		for q, pr := range ib.posted {
			delete(ib.posted, q)
			pr.done <- errClosed
		}
		for q, msgs := range ib.queue {
			for _, msg := range msgs {
				bufpool.Put(msg.buf)
			}
			delete(ib.queue, q)
		}
		ib.mu.Unlock()
		if v.m.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(v.m.ctx, closeNotifyTimeout)
		defer cancel()
		for peer, q := range v.ranks {
			if peer != v.rank && v.m.failure(q) == nil {
				_ = v.send(ctx, q, transport.Header{}, nil, kindClose) // best effort: the peer may be gone
			}
		}
	})
	return nil
}
