package group

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"github.com/collkit/collkit/transport"
)

// Transport is one member's end of a group. Its methods are safe for
// concurrent use within the transport contract.
type Transport struct {
	parent transport.Transport
	ranks  []int // parent rank of each group rank
	rank   int
	comm   uint32

	// closing is cancelled by Close; every parent call runs under a context
	// that it cancels, so that Close unblocks calls without closing the
	// parent.
	closing context.Context
	close   context.CancelFunc

	mu     sync.Mutex
	closed bool
	cached [keptScopes]*scope // the scopes of the last caller contexts, kept for the next calls
	next   int                // the slot the next new scope takes
}

// keptScopes is how many caller contexts a group keeps scopes for: a
// collective's own and the one its helper goroutines share (algo/pipeline's
// Crew), with room to spare.
const keptScopes = 4

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Buffered  = (*Transport)(nil)
)

// New returns this rank's end of the group of parent ranks ranks, listed in
// group rank order, with communicator id comm. ranks must hold distinct
// parent ranks including parent.Rank(), and every member must call New with
// the same ranks and comm. Choose a comm that no group sharing connections
// with this one uses, and not zero, which would not tell the group's messages
// from the parent's. New does no I/O and keeps no reference to ranks.
func New(parent transport.Transport, ranks []int, comm uint32) (*Transport, error) {
	size, me := parent.Size(), parent.Rank()
	rank := -1
	seen := make(map[int]int, len(ranks))
	for i, pr := range ranks {
		if pr < 0 || pr >= size {
			return nil, fmt.Errorf("group: ranks[%d] is %d, not a rank of the parent (which has %d ranks, 0 to %d)", i, pr, size, size-1)
		}
		if j, dup := seen[pr]; dup {
			return nil, fmt.Errorf("group: parent rank %d is listed twice in ranks (at %d and %d); list each member once", pr, j, i)
		}
		seen[pr] = i
		if pr == me {
			rank = i
		}
	}
	if rank < 0 {
		return nil, fmt.Errorf("group: ranks %v do not include this process (rank %d of the parent); only members build a group", ranks, me)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		parent:  parent,
		ranks:   append([]int(nil), ranks...),
		rank:    rank,
		comm:    comm,
		closing: ctx,
		close:   cancel,
	}, nil
}

// Rank is this process's rank in the group: its index in ranks.
func (g *Transport) Rank() int { return g.rank }

// Size is the number of members.
func (g *Transport) Size() int { return len(g.ranks) }

// Comm is the group's communicator id.
func (g *Transport) Comm() uint32 { return g.comm }

// ParentRank returns the parent rank of group rank r.
func (g *Transport) ParentRank(r int) int { return g.ranks[r] }

// SendBuffer forwards the parent's transport.Buffered capability; it is zero
// when the parent does not buffer sends.
func (g *Transport) SendBuffer() int {
	if b, ok := g.parent.(transport.Buffered); ok {
		return b.SendBuffer()
	}
	return 0
}

// Send sends p to group rank peer through the parent.
func (g *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	pp, err := g.peer("send", peer)
	if err != nil {
		return err
	}
	s, err := g.acquire(ctx)
	if err != nil {
		return g.fail("send", peer, pp, err)
	}
	h.Comm ^= g.comm
	err = g.parent.Send(s.ctx, pp, h, p)
	g.release(s)
	if err != nil {
		return g.fail("send", peer, pp, err)
	}
	return nil
}

// Recv receives the next message from group rank peer through the parent.
func (g *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	pp, err := g.peer("recv", peer)
	if err != nil {
		return err
	}
	s, err := g.acquire(ctx)
	if err != nil {
		return g.fail("recv", peer, pp, err)
	}
	h.Comm ^= g.comm
	err = g.parent.Recv(s.ctx, pp, h, p)
	g.release(s)
	if err != nil {
		return g.fail("recv", peer, pp, err)
	}
	return nil
}

// Peek shows the next message from group rank peer through the parent, when
// the parent is a transport.Peeker, with the group's mark on Comm undone.
func (g *Transport) Peek(peer int) (transport.Header, bool) {
	pk, ok := g.parent.(transport.Peeker)
	if !ok || peer < 0 || peer >= len(g.ranks) {
		return transport.Header{}, false
	}
	h, ok := pk.Peek(g.ranks[peer])
	h.Comm ^= g.comm
	return h, ok
}

// Close fails this rank's pending and later group calls with an error
// wrapping transport.ErrClosed. It does not close the parent. Close a group
// when done with it: that also releases the hold it keeps on the context of
// its last call. It always returns nil.
func (g *Transport) Close() error {
	g.mu.Lock()
	g.closed = true
	g.cached = [keptScopes]*scope{}
	g.mu.Unlock()
	g.close() // cancels every scope, which releases them
	return nil
}

func (g *Transport) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

var errClosed = fmt.Errorf("group: %w", transport.ErrClosed)

// peer validates a group peer and returns its parent rank.
func (g *Transport) peer(op string, peer int) (int, error) {
	switch {
	case peer < 0 || peer >= len(g.ranks):
		return 0, &transport.PeerError{Rank: peer, Op: op,
			Err: fmt.Errorf("group: rank %d is not in [0, %d): %w", peer, len(g.ranks), transport.ErrBadPeer)}
	case peer == g.rank:
		return 0, &transport.PeerError{Rank: peer, Op: op,
			Err: fmt.Errorf("group: rank %d is this rank: %w", peer, transport.ErrBadPeer)}
	}
	return g.ranks[peer], nil
}

// fail turns an error about parent rank pp into one about group rank peer:
// a *transport.PeerError naming peer, with the parent rank (and address) in
// Addr, and mismatches translated back into the caller's header.
func (g *Transport) fail(op string, peer, pp int, err error) error {
	addr := "parent rank " + strconv.Itoa(pp)
	if pe, ok := err.(*transport.PeerError); ok && pe.Rank == pp {
		if pe.Addr != "" {
			addr += ", " + pe.Addr
		}
		err = pe.Err
	}
	var me *transport.MismatchError
	if errors.As(err, &me) {
		want, got := me.Want, me.Got
		want.Comm ^= g.comm
		got.Comm ^= g.comm
		err = &transport.MismatchError{Peer: peer, Want: want, Got: got}
	} else if err != errClosed && g.isClosed() {
		// The parent saw its context cancelled by Close.
		err = errClosed
	}
	return &transport.PeerError{Rank: peer, Addr: addr, Op: op, Err: err}
}

// scope is a context that ends when the caller's context ends or the group
// closes. Some are kept per group for the caller's last contexts, since an
// algorithm passes the same context to every message of a collective, and
// a communicator the same to one collective after another: that saves a
// context and a registration per message.
type scope struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	refs   int
}

func (g *Transport) acquire(ctx context.Context) (*scope, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errClosed
	}
	comparable := reflect.TypeOf(ctx).Comparable()
	if comparable {
		for _, s := range g.cached {
			if s != nil && s.parent == ctx {
				s.refs++
				return s, nil
			}
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.closing, cancel)
	s := &scope{parent: ctx, ctx: mctx, refs: 1, cancel: func() { stop(); cancel() }}
	if comparable {
		// Take the next slot whose scope is idle, in turn.
		for range keptScopes {
			i := g.next
			g.next = (g.next + 1) % keptScopes
			if old := g.cached[i]; old == nil || old.refs == 0 {
				if old != nil {
					old.cancel()
				}
				g.cached[i] = s
				break
			}
		}
	}
	return s, nil
}

func (g *Transport) release(s *scope) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.refs--
	if s.refs == 0 && !slices.Contains(g.cached[:], s) {
		s.cancel()
	}
}
