package collkit

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mux"
)

// NoColor is the color of a rank that takes no part in a Split's new
// communicators. Any negative color does the same.
const NoColor = -1

// subState is where a communicator sits among the communicators that share
// its connections.
type subState struct {
	mux     *mux.Mux // nil until the first Split of the root communicator
	members []int    // the mux parent rank of each rank of this communicator
	id      uint32   // communicator id on the mux; 0 for the root
	splits  uint32   // Splits made from this communicator so far
}

// Split divides the communicator: the ranks that pass the same color form a
// new communicator, ranked by key (ties by their rank here). Every rank
// calls Split at the same point in its sequence of collectives; a rank that
// passes a negative color (NoColor) takes part in the exchange but gets a
// nil Comm.
//
// The new communicator shares this one's connections and has its own rank
// numbering and its own sequence of operations: it may run at the same time
// as this communicator and as its siblings, on other goroutines. Close it
// when done; that does not close this one. Closing this communicator's
// root (the one from New or FromEnv) closes every communicator split from
// it.
//
// The first Split of a root communicator moves it onto a multiplexer
// (transport/mux), which costs every later message of every communicator
// sharing the connections an envelope message and, when its receiver is
// not yet waiting, a copy.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	var sub *Comm
	err := c.call(ctx, nameSplit, funcOp(func(ctx context.Context) (err error) {
		sub, err = c.split(ctx, color, key)
		return err
	}), nil)
	return sub, err
}

// split is Split in its turn. The caller holds c.mu.
func (c *Comm) split(ctx context.Context, color, key int) (*Comm, error) {
	n := c.Size()
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*n)
	err := c.runColl(ctx, "split", header(transport.CollAllGather, Int64, 0, 2*n, -1, algoRing),
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return ring.AllGather(ctx, t, h, reduce.Bytes(mine), reduce.Bytes(all), c.evenCounts(2))
		})
	if err != nil {
		return nil, err
	}
	if c.sub.mux == nil {
		// Every message addressed to this rank before now has been
		// received: from here on, all of them go through the mux.
		m := mux.New(c.t)
		c.sub.members = make([]int, n)
		for r := range n {
			c.sub.members[r] = r
		}
		view, err := m.Open(0, c.sub.members)
		if err != nil {
			m.Close()
			return nil, c.fail(fmt.Errorf("collkit: rank %d: split: %w", c.Rank(), err))
		}
		c.t, c.sub.mux = view, m
		c.tGen++
		c.closers = append(c.closers, m)
	}
	index := c.sub.splits
	c.sub.splits++
	if color < 0 {
		return nil, nil
	}
	var ranks []int
	for r := range n {
		if all[2*r] == int64(color) {
			ranks = append(ranks, r)
		}
	}
	slices.SortStableFunc(ranks, func(a, b int) int { return cmp.Compare(all[2*a+1], all[2*b+1]) })
	parents := make([]int, len(ranks))
	nodes := make([]int, len(ranks))
	for i, r := range ranks {
		parents[i] = c.sub.members[r]
		nodes[i] = c.nodes[r]
	}
	id := subID(c.sub.id, index, color)
	view, err := c.sub.mux.Open(id, parents)
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d: split: %w", c.Rank(), err)
	}
	sub := &Comm{
		t: view, base: view, rank: view.Rank(), size: view.Size(),
		transportName: c.transportName, algo: c.algo, tuning: c.tuning, nodes: nodes,
		timeout: c.timeout, treeBytes: c.treeBytes, bcastBytes: c.bcastBytes, directBytes: c.directBytes,
		sub: subState{mux: c.sub.mux, members: parents, id: id},
	}
	if sub.run, err = sub.algorithm(sub.algo); err != nil {
		view.Close()
		return nil, err
	}
	return sub, nil
}

// subID derives the communicator id of a Split's color from its parent's
// id and the Split's number, the same on every rank. Zero is the root's.
func subID(parent, index uint32, color int) uint32 {
	h := fnv.New32a()
	var b [16]byte
	binary.LittleEndian.PutUint32(b[0:], parent)
	binary.LittleEndian.PutUint32(b[4:], index)
	binary.LittleEndian.PutUint64(b[8:], uint64(color))
	h.Write(b[:])
	return max(h.Sum32(), 1)
}

// Mesh is one rank's place in a data x tensor x pipeline parallel layout
// and its three groups. Ranks are laid out with tensor parallelism
// innermost: rank = (pp*DP + dp)*TP + tp, so the ranks of a tensor group are
// consecutive (usually one node).
type Mesh struct {
	DP, TP, PP             *Comm // the groups along each dimension
	DPRank, TPRank, PPRank int   // this rank's coordinates (its rank in each group)
}

// Mesh splits the communicator into a dp x tp x pp mesh; dp*tp*pp must be
// Size(). Every rank calls it at the same point in its sequence of
// collectives. The three groups are independent communicators that may be
// used at the same time.
func (c *Comm) Mesh(ctx context.Context, dp, tp, pp int) (*Mesh, error) {
	if dp < 1 || tp < 1 || pp < 1 || dp*tp*pp != c.Size() {
		return nil, fmt.Errorf("collkit: rank %d: mesh: %w: dp %d x tp %d x pp %d = %d ranks, but the communicator has %d; choose sizes whose product is %d",
			c.Rank(), ErrBadArgument, dp, tp, pp, dp*tp*pp, c.Size(), c.Size())
	}
	r := c.Rank()
	t, d, p := r%tp, r/tp%dp, r/(tp*dp)
	var m Mesh
	var err error
	if m.TP, err = c.Split(ctx, p*dp+d, t); err != nil {
		return nil, err
	}
	if m.DP, err = c.Split(ctx, p*tp+t, d); err != nil {
		m.Close()
		return nil, err
	}
	if m.PP, err = c.Split(ctx, d*tp+t, p); err != nil {
		m.Close()
		return nil, err
	}
	m.DPRank, m.TPRank, m.PPRank = d, t, p
	return &m, nil
}

// Close closes the three groups.
func (m *Mesh) Close() error {
	var errs []error
	for _, c := range []*Comm{m.DP, m.TP, m.PP} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
