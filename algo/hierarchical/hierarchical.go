package hierarchical

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/group"
)

// AllReduceFunc is the shape of the algorithm run at one level, the shape of
// ring.AllReduce.
type AllReduceFunc func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error

// Config describes the nodes and the algorithms of each level. Nodes is
// required; the zero value of every other field means ring over groups of
// the main transport.
type Config struct {
	// Nodes[r] is the node of rank r: ranks with the same id share a node.
	// The ids are any ints (GroupBy makes them from host names); nodes are
	// numbered by first appearance, and a rank's local rank is its index
	// among its node's ranks in rank order. Every rank passes the same Nodes.
	Nodes []int
	// Intra is the all-reduce inside a node, used when nodes differ in size
	// and when there is one node. Nil means Ring.AllReduce.
	Intra AllReduceFunc
	// Inter is the all-reduce across nodes, of each shard when nodes have
	// the same size, of the node leaders' buffers when not, and of the whole
	// buffer when every node has one rank. Nil means Ring.AllReduce.
	Inter AllReduceFunc
	// IntraTransport, if set, carries the intra-node level instead of a group
	// of the main transport. It connects exactly this rank's node: its Size
	// is the node's number of ranks and its Rank this rank's local rank.
	// When it runs collectives itself (transport.NativeCollectives, such
	// as NCCL), the intra-node phases are its own reduce-scatter and
	// all-gather (or reduce and broadcast), even with one rank per node.
	IntraTransport transport.Transport
	// InterTransport, if set, carries the inter-node level instead of a group
	// of the main transport. It connects this rank with the ranks of the
	// same local rank on the other nodes: its Size is the number of nodes and
	// its Rank this rank's node number (by first appearance in Nodes). With
	// nodes of different sizes only local rank 0, the leaders, use it.
	InterTransport transport.Transport
	// Ring tunes the ring reduce-scatter, all-gather and broadcast inside a
	// node, and the ring all-reduce that nil Intra and Inter mean.
	Ring ring.Config
}

// GroupBy maps keys, such as the host name of every rank, to node ids for
// Config.Nodes: equal keys get equal ids, numbered in order of first
// appearance.
func GroupBy(keys []string) []int {
	ids := make(map[string]int, len(keys))
	nodes := make([]int, len(keys))
	for r, k := range keys {
		id, ok := ids[k]
		if !ok {
			id = len(ids)
			ids[k] = id
		}
		nodes[r] = id
	}
	return nodes
}

// Levels of the hierarchy, for communicator ids.
const (
	levelIntra   = 1
	levelInter   = 2
	levelLeaders = 3
)

// commTag is XORed into the Comm of every message of a level: it sets the
// level apart, and marks an Avg run as Sum (the inner algorithms only sum)
// so that ranks that disagree on Sum and Avg still get a mismatch error.
func commTag(level int, avg bool) uint32 {
	tag := uint32(0x80|level) << 24
	if avg {
		tag |= 1 << 23
	}
	return tag
}

// groupComm is the id of a group made over the main transport: the level
// and the node (intra) or local rank (inter) it belongs to. The group XORs
// it into the Comm on top of commTag; the bits do not overlap.
func groupComm(level, index int) uint32 {
	return uint32(level)<<20 | uint32(index)&0xFFFFF
}

// topology is where this rank sits.
type topology struct {
	nodes [][]int // the ranks of each node, in rank order; nodes by first appearance
	node  int     // this rank's node
	local int     // this rank's index in nodes[node]
	even  bool    // every node has the same number of ranks
	hash  uint32  // of the layout, the same for every rank given the same Nodes
}

func (c Config) topology(t transport.Transport) (topology, error) {
	n, r := t.Size(), t.Rank()
	if c.Nodes == nil {
		return topology{}, fmt.Errorf("hierarchical: rank %d: Config.Nodes is nil; give the node id of every rank (e.g. hierarchical.GroupBy(hostnames))", r)
	}
	if len(c.Nodes) != n {
		return topology{}, fmt.Errorf("hierarchical: rank %d: Config.Nodes has %d entries but the transport has %d ranks; give one node id per rank, in rank order",
			r, len(c.Nodes), n)
	}
	tp := topology{hash: 2166136261} // FNV-1a of the node numbers
	index := make(map[int]int)
	for rank, id := range c.Nodes {
		k, ok := index[id]
		if !ok {
			k = len(tp.nodes)
			index[id] = k
			tp.nodes = append(tp.nodes, nil)
		}
		tp.hash = (tp.hash ^ uint32(k)) * 16777619
		if rank == r {
			tp.node, tp.local = k, len(tp.nodes[k])
		}
		tp.nodes[k] = append(tp.nodes[k], rank)
	}
	tp.even = true
	for _, ranks := range tp.nodes {
		tp.even = tp.even && len(ranks) == len(tp.nodes[0])
	}
	return tp, nil
}

// AllReduce runs a hierarchical all-reduce with the default algorithms of
// Config: send is reduced over all ranks of t into recv, with h.DType and
// h.Op, as ring.AllReduce does. send and recv have the same length, a
// multiple of the element size; they may be the same slice.
//
// When every node has L ranks: the ranks of a node reduce-scatter the buffer
// into L shards (local rank l gets shard l), the ranks of local rank l on
// every node all-reduce shard l with Inter, all L shards at once, and the
// ranks of a node all-gather the shards. When nodes differ in size: the
// ranks of a node all-reduce with Intra, the node leaders (local rank 0)
// all-reduce with Inter, and each leader broadcasts to its node. One node,
// or one rank per node, is a flat all-reduce with Intra or Inter.
//
// Avg is summed at every level and divided by the number of ranks once, so
// the result has the same bits as a flat all-reduce's.
func (c Config) AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	es, err := pipeline.CheckAllReduce(h, send, recv)
	if err != nil {
		return fmt.Errorf("hierarchical: %w", err)
	}
	st, err := c.acquire(t)
	if err != nil {
		return err
	}
	defer st.release()
	tp := &st.tp
	// Nil Intra and Inter stay nil, and levelAllReduce calls c.Ring: the
	// method value c.Ring.AllReduce would cost an allocation per call.
	intra, inter := c.Intra, c.Inter
	size := len(tp.nodes[tp.node])
	native := c.nativeIntra()
	switch {
	case len(tp.nodes) == 1:
		return c.flat(ctx, "intra-node", intra, c.IntraTransport, t, h, send, recv)
	case tp.even && size == 1 && native == nil:
		return c.flat(ctx, "inter-node", inter, c.InterTransport, t, h, send, recv)
	}
	if !pipeline.SameBuffer(send, recv) {
		copy(recv, send)
	}
	x := &st.run
	*x = run{c: c, t: t, st: st, tp: tp, h: h, n: n, intra: intra, inter: inter}
	if x.h.Op == reduce.Avg {
		x.h.Op = reduce.Sum
		x.avg = true
	}
	switch {
	case native != nil:
		err = x.native(ctx, native, recv, es)
	case tp.even:
		err = x.shards(ctx, recv, es)
	default:
		err = x.leaders(ctx, recv)
	}
	*x = run{}
	if err != nil {
		return fmt.Errorf("hierarchical: rank %d (node %d, local rank %d of %d): %w", r, tp.node, tp.local, size, err)
	}
	return nil
}

// flat runs the whole all-reduce at one level: there is only one.
func (c Config) flat(ctx context.Context, level string, fn AllReduceFunc, lt, t transport.Transport, h transport.Header, send, recv []byte) error {
	if lt == nil {
		lt = t
	} else if lt.Size() != t.Size() || lt.Rank() != t.Rank() {
		return fmt.Errorf("hierarchical: rank %d: the %s transport has rank %d of %d, but this is the only level, so it must span all %d ranks with the same numbering",
			t.Rank(), level, lt.Rank(), lt.Size(), t.Size())
	}
	if err := c.levelAllReduce(ctx, fn, lt, h, send, recv); err != nil {
		return fmt.Errorf("hierarchical: rank %d: %s all-reduce: %w", t.Rank(), level, err)
	}
	return nil
}

// levelAllReduce runs fn, Config.Intra or Inter, or the ring when it is nil.
func (c *Config) levelAllReduce(ctx context.Context, fn AllReduceFunc, t transport.Transport, h transport.Header, send, recv []byte) error {
	if fn == nil {
		return c.Ring.AllReduce(ctx, t, h, send, recv)
	}
	return fn(ctx, t, h, send, recv)
}

// run is one hierarchical all-reduce on one rank.
type run struct {
	c            Config
	t            transport.Transport
	st           *state
	tp           *topology
	h            transport.Header // the caller's, with Sum for Avg
	avg          bool
	n            int           // ranks in all
	intra, inter AllReduceFunc // nil: the ring
}

// header is the header of one phase: the level's tag in Comm and the
// phase's collective, so that no message of one phase passes for another's,
// and a hash of the layout in Comm, so that ranks whose Nodes differ get a
// mismatch error where their messages meet.
func (x *run) header(level int, coll transport.Coll) transport.Header {
	h := x.h
	h.Comm ^= commTag(level, x.avg) ^ x.tp.hash
	h.Coll = coll
	return h
}

// intraT is the transport of this rank's node.
func (x *run) intraT() (transport.Transport, error) {
	ranks := x.tp.nodes[x.tp.node]
	if lt := x.c.IntraTransport; lt != nil {
		if lt.Size() != len(ranks) || lt.Rank() != x.tp.local {
			return nil, fmt.Errorf("Config.IntraTransport has rank %d of %d, but Nodes puts this rank at local rank %d of %d; it must connect exactly this node's ranks, numbered in rank order",
				lt.Rank(), lt.Size(), x.tp.local, len(ranks))
		}
		return lt, nil
	}
	return x.st.group(x.t, levelIntra, ranks, groupComm(levelIntra, x.tp.node))
}

// interT is the transport between this rank and the ranks of the same local
// rank on the other nodes (all of them have one when nodes are even; only
// the leaders use it when not).
func (x *run) interT(level int) (transport.Transport, error) {
	if lt := x.c.InterTransport; lt != nil {
		if lt.Size() != len(x.tp.nodes) || lt.Rank() != x.tp.node {
			return nil, fmt.Errorf("Config.InterTransport has rank %d of %d, but Nodes puts this rank on node %d of %d; it must connect one rank of every node, numbered by node",
				lt.Rank(), lt.Size(), x.tp.node, len(x.tp.nodes))
		}
		return lt, nil
	}
	if g := x.st.groups[level]; g != nil {
		return g, nil
	}
	ranks := make([]int, len(x.tp.nodes))
	for k, node := range x.tp.nodes {
		ranks[k] = node[x.tp.local]
	}
	return x.st.group(x.t, level, ranks, groupComm(level, x.tp.local))
}

// shards is the all-reduce of nodes of L ranks each, in three phases over
// L shards of buf that differ by at most one element.
func (x *run) shards(ctx context.Context, buf []byte, es int) error {
	intraT, err := x.intraT()
	if err != nil {
		return err
	}
	if _, err := x.interT(levelInter); err != nil {
		return err
	}
	size := len(x.tp.nodes[x.tp.node])
	count := len(buf) / es
	if cap(x.st.counts) < size {
		x.st.counts = make([]int, size)
	}
	counts := x.st.counts[:size]
	for l := range size {
		counts[l] = (l+1)*count/size - l*count/size
	}
	lo := x.tp.local * count / size * es
	shard := buf[lo : lo+counts[x.tp.local]*es]

	// In place: buf's other shards serve as the reduce-scatter's scratch
	// until the all-gather fills them.
	if err := x.c.Ring.ReduceScatter(ctx, intraT, x.header(levelIntra, transport.CollReduceScatter), buf, shard, counts); err != nil {
		return x.intraErr("intra-node reduce-scatter", err)
	}
	if err := x.across(ctx, levelInter, shard); err != nil {
		return fmt.Errorf("inter-node all-reduce of shard %d: %w", x.tp.local, err)
	}
	if err := x.c.Ring.AllGather(ctx, intraT, x.header(levelIntra, transport.CollAllGather), shard, buf, counts); err != nil {
		return x.intraErr("intra-node all-gather", err)
	}
	return nil
}

// leaders is the all-reduce of nodes of different sizes: within each node,
// then among the node leaders, then from each leader to its node.
func (x *run) leaders(ctx context.Context, buf []byte) error {
	size := len(x.tp.nodes[x.tp.node])
	var intraT transport.Transport
	if size > 1 {
		var err error
		if intraT, err = x.intraT(); err != nil {
			return err
		}
		if err := x.c.levelAllReduce(ctx, x.intra, intraT, x.header(levelIntra, x.h.Coll), buf, buf); err != nil {
			return x.intraErr("intra-node all-reduce", err)
		}
	}
	if x.tp.local == 0 {
		if err := x.across(ctx, levelLeaders, buf); err != nil {
			return fmt.Errorf("all-reduce among node leaders: %w", err)
		}
	}
	if size > 1 {
		h := x.header(levelIntra, transport.CollBroadcast)
		if err := x.c.Ring.Broadcast(ctx, intraT, h, buf, 0); err != nil {
			return x.intraErr("intra-node broadcast from the leader", err)
		}
	}
	return nil
}

// across all-reduces buf in place with the ranks of the other nodes at
// level (levelInter: the same local rank; levelLeaders: the leaders), and
// divides it for Avg: it is the last level to sum.
func (x *run) across(ctx context.Context, level int, buf []byte) error {
	interT, err := x.interT(level)
	if err != nil {
		return err
	}
	if err := x.c.levelAllReduce(ctx, x.inter, interT, x.header(level, x.h.Coll), buf, buf); err != nil {
		return err
	}
	if x.avg {
		reduce.Finish(x.h.DType, reduce.Avg, buf, x.n)
	}
	return nil
}

// intraErr wraps an error of the intra-node level. A transport given as
// Config.IntraTransport numbers the node's ranks from 0; a peer error from it
// is wrapped in one that names the peer's rank in the whole job, so errors
// and stall reports point at the right process.
func (x *run) intraErr(what string, err error) error {
	var pe *transport.PeerError
	ranks := x.tp.nodes[x.tp.node]
	if x.c.IntraTransport != nil && errors.As(err, &pe) && pe.Rank >= 0 && pe.Rank < len(ranks) {
		err = &transport.PeerError{Rank: ranks[pe.Rank], Addr: fmt.Sprintf("local rank %d of node %d", pe.Rank, x.tp.node), Op: pe.Op, Err: err}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// state is what one rank's all-reduces over one transport keep from call to
// call: the topology and the groups of each level. It is kept in a small
// cache, so that a steady stream of all-reduces builds them once and
// allocates nothing.
type state struct {
	t              transport.Transport
	nodes          []int               // Config.Nodes when built
	intraT, interT transport.Transport // Config's, when built
	tp             topology
	groups         [4]*group.Transport // by level; nil until needed
	counts         []int               // the shards' element counts
	host           []byte              // AllReduceDevice's host copy of what crosses nodes
	run            run
}

// group returns the group of level, made over t from ranks with id comm
// the first time.
func (st *state) group(t transport.Transport, level int, ranks []int, comm uint32) (transport.Transport, error) {
	if g := st.groups[level]; g != nil {
		return g, nil
	}
	g, err := group.New(t, ranks, comm)
	if err != nil {
		return nil, err
	}
	st.groups[level] = g
	return g, nil
}

func (st *state) close() {
	for _, g := range st.groups {
		if g != nil {
			g.Close()
		}
	}
}

// maxStates bounds the cache: beyond it the oldest state's groups close.
const maxStates = 16

var states struct {
	sync.Mutex
	free []*state
}

// acquire returns the state of c's all-reduces over t, from the cache when
// it holds one made with the same transports and Nodes. The caller gives it
// back with release.
func (c Config) acquire(t transport.Transport) (*state, error) {
	cacheable := reflect.TypeOf(t).Comparable() &&
		(c.IntraTransport == nil || reflect.TypeOf(c.IntraTransport).Comparable()) &&
		(c.InterTransport == nil || reflect.TypeOf(c.InterTransport).Comparable())
	if cacheable {
		states.Lock()
		for i, st := range states.free {
			if st.t == t && st.intraT == c.IntraTransport && st.interT == c.InterTransport && slices.Equal(st.nodes, c.Nodes) {
				states.free = slices.Delete(states.free, i, i+1)
				states.Unlock()
				return st, nil
			}
		}
		states.Unlock()
	}
	tp, err := c.topology(t)
	if err != nil {
		return nil, err
	}
	st := &state{tp: tp, nodes: slices.Clone(c.Nodes)}
	if cacheable {
		st.t, st.intraT, st.interT = t, c.IntraTransport, c.InterTransport
	}
	return st, nil
}

// release gives st back to the cache, or closes its groups when it cannot
// be found again.
func (st *state) release() {
	if st.t == nil {
		st.close()
		return
	}
	states.Lock()
	var evicted *state
	if len(states.free) == maxStates {
		evicted = states.free[0]
		states.free = slices.Delete(states.free, 0, 1)
	}
	states.free = append(states.free, st)
	states.Unlock()
	if evicted != nil {
		evicted.close()
	}
}
