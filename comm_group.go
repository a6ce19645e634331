package collkit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/collkit/collkit/internal/bufpool"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// DefaultFusionBytes is the largest fusion buffer a Group packs
// all-reduces into when Group.FusionBytes is zero.
const DefaultFusionBytes = 64 << 20

// Group collects operations and runs them as one unit when Run is called,
// like ncclGroupStart/ncclGroupEnd:
//
//   - all-reduces of the same dtype and op are fused: their inputs are
//     packed into one buffer (up to FusionBytes), reduced by one all-reduce,
//     and the results copied back, so that many small tensors pay the
//     latency of one collective (tensor fusion, as Horovod does);
//   - the other collectives run after them, in the order they were added;
//   - sends and receives run last and concurrently, one goroutine per peer
//     and direction, so ranks may exchange data both ways without
//     deadlocking.
//
// Every rank must add the same collectives in the same order (sends and
// receives only need to match their peers'). The operations of a group must
// not depend on each other's results, since fusion and grouping reorder
// them. A Group is not safe for concurrent use; it can be Run once.
type Group struct {
	c *Comm
	// FusionBytes caps one fusion buffer. Zero means DefaultFusionBytes;
	// negative turns fusion off (every all-reduce runs on its own).
	FusionBytes int

	reduces []groupReduce
	colls   []operation
	p2p     []groupP2P
	err     error // the first argument error
	ran     bool
}

type groupReduce struct {
	dt         DType
	op         Op
	send, recv []byte
}

type groupP2P struct {
	send bool
	peer int
	dt   DType
	buf  []byte
}

// Group starts an empty group on c.
func (c *Comm) Group() *Group { return &Group{c: c} }

func (g *Group) add(o operation, err error) {
	switch {
	case err != nil && g.err == nil:
		g.err = err
	case err == nil:
		g.colls = append(g.colls, o)
	}
}

// AllReduce adds an all-reduce (see Comm.AllReduce) to the group.
func (g *Group) AllReduce(dt DType, op Op, send, recv []byte) {
	if err := checkBuffers(dt, op, send, recv); err != nil {
		if g.err == nil {
			g.err = fmt.Errorf("collkit: rank %d: group allreduce %d: %w", g.c.Rank(), len(g.reduces), err)
		}
		return
	}
	g.reduces = append(g.reduces, groupReduce{dt, op, send, recv})
}

// Broadcast adds a broadcast (see Comm.Broadcast).
func (g *Group) Broadcast(dt DType, buf []byte, root int) { g.add(g.c.broadcastOp(dt, buf, root)) }

// Reduce adds a reduce (see Comm.Reduce).
func (g *Group) Reduce(dt DType, op Op, send, recv []byte, root int) {
	g.add(g.c.reduceOp(dt, op, send, recv, root))
}

// AllGather adds an all-gather (see Comm.AllGather).
func (g *Group) AllGather(dt DType, send, recv []byte) { g.add(g.c.allGatherOp(dt, send, recv)) }

// ReduceScatter adds a reduce-scatter (see Comm.ReduceScatter).
func (g *Group) ReduceScatter(dt DType, op Op, send, recv []byte) {
	g.add(g.c.reduceScatterOp(dt, op, send, recv))
}

// Gather adds a gather (see Comm.Gather).
func (g *Group) Gather(dt DType, send, recv []byte, root int) {
	g.add(g.c.gatherOp(dt, send, recv, root))
}

// Scatter adds a scatter (see Comm.Scatter).
func (g *Group) Scatter(dt DType, send, recv []byte, root int) {
	g.add(g.c.scatterOp(dt, send, recv, root))
}

// AllToAll adds an all-to-all (see Comm.AllToAll).
func (g *Group) AllToAll(dt DType, send, recv []byte) { g.add(g.c.allToAllOp(dt, send, recv)) }

// Send adds a send of buf to rank peer (see Comm.Send).
func (g *Group) Send(dt DType, buf []byte, peer int) { g.addP2P("send", true, dt, buf, peer) }

// Recv adds a receive from rank peer into buf (see Comm.Recv).
func (g *Group) Recv(dt DType, buf []byte, peer int) { g.addP2P("recv", false, dt, buf, peer) }

func (g *Group) addP2P(what string, send bool, dt DType, buf []byte, peer int) {
	if err := g.c.checkP2P(what, dt, buf, peer); err != nil {
		if g.err == nil {
			g.err = err
		}
		return
	}
	g.p2p = append(g.p2p, groupP2P{send, peer, dt, buf})
}

// Run runs the group's operations and returns when all are done. An
// argument error of any added operation is returned before anything runs;
// like a failure while running, it is fatal to the communicator, so that
// the other ranks fail at this group too.
func (g *Group) Run(ctx context.Context) error {
	run, err := g.op()
	return g.c.call(ctx, nameGroup, run, err)
}

// Start starts the group's operations and returns at once (see Work and
// Run).
func (g *Group) Start(ctx context.Context) *Work {
	run, err := g.op()
	return g.c.start(ctx, nameGroup, run, err)
}

func (g *Group) op() (operation, error) {
	if g.ran {
		return operation{}, fmt.Errorf("collkit: rank %d: %w: group already run; start a new one with Comm.Group", g.c.Rank(), ErrBadArgument)
	}
	g.ran = true
	if g.err != nil {
		return operation{}, g.err
	}
	return funcOp(func(ctx context.Context) error {
		if err := g.runReduces(ctx); err != nil {
			return err
		}
		for i := range g.colls {
			if err := g.c.runOp(ctx, &g.colls[i]); err != nil {
				return err
			}
		}
		return g.runP2P(ctx)
	}), nil
}

// runReduces runs the all-reduces, fused by dtype and op in order of first
// appearance, each bucket cut where it would exceed the fusion size.
func (g *Group) runReduces(ctx context.Context) error {
	limit := g.FusionBytes
	if limit == 0 {
		limit = DefaultFusionBytes
	}
	type key struct {
		dt DType
		op Op
	}
	var order []key
	byKey := map[key][]groupReduce{}
	for _, r := range g.reduces {
		k := key{r.dt, r.op}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	for _, k := range order {
		rs := byKey[k]
		for len(rs) > 0 {
			// Take the longest prefix that fits (at least one).
			n, bytes := 1, len(rs[0].send)
			for n < len(rs) && limit > 0 && bytes+len(rs[n].send) <= limit {
				bytes += len(rs[n].send)
				n++
			}
			if err := g.fused(ctx, k.dt, k.op, rs[:n], bytes); err != nil {
				return err
			}
			rs = rs[n:]
		}
	}
	return nil
}

// fused all-reduces rs, of bytes in total, as one buffer from the shared
// pools (internal/bufpool).
func (g *Group) fused(ctx context.Context, dt DType, op Op, rs []groupReduce, bytes int) error {
	c := g.c
	if len(rs) == 1 {
		return c.allReduce(ctx, dt, op, rs[0].send, rs[0].recv)
	}
	fb := bufpool.Get(bytes)
	defer bufpool.Put(fb)
	buf := fb.B
	off := 0
	for _, r := range rs {
		off += copy(buf[off:], r.send)
	}
	if err := c.allReduce(ctx, dt, op, buf, buf); err != nil {
		return err
	}
	off = 0
	for _, r := range rs {
		off += copy(r.recv, buf[off:off+len(r.recv)])
	}
	return nil
}

// runP2P runs the sends and receives concurrently: one goroutine per peer
// and direction, each in the order they were added. The caller holds c.mu.
func (g *Group) runP2P(ctx context.Context) error {
	if len(g.p2p) == 0 {
		return nil
	}
	c := g.c
	if err := c.usable(); err != nil {
		return err
	}
	type lane struct {
		send bool
		peer int
	}
	lanes := map[lane][]func(context.Context, transport.Transport) error{}
	var order []lane
	for _, p := range g.p2p {
		l := lane{p.send, p.peer}
		if _, ok := lanes[l]; !ok {
			order = append(order, l)
		}
		h := c.p2pHeader(p.dt, p.buf, p.peer, p.send)
		fn := func(ctx context.Context, t transport.Transport) error {
			if p.send {
				return sendChunks(ctx, t, p.peer, h, p.buf)
			}
			return recvChunks(ctx, t, p.peer, h, p.buf)
		}
		lanes[l] = append(lanes[l], fn)
	}
	ctx, done := c.withTimeout(ctx)
	defer done()
	ctx, cancel := context.WithCancel(ctx) // a failed lane stops the others
	defer cancel()
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	bytes := 0
	for _, p := range g.p2p {
		bytes += len(p.buf)
	}
	c.observed("group sendrecv", "direct", transport.Header{}, bytes, func(t transport.Transport) error {
		for i, l := range order {
			wg.Go(func() {
				for _, fn := range lanes[l] {
					if err := fn(ctx, t); err != nil {
						dir := map[bool]string{true: "send to", false: "recv from"}[l.send]
						errs[i] = fmt.Errorf("%s rank %d: %w", dir, l.peer, err)
						cancel()
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err := errors.Join(errs...); err != nil {
		return c.fail(fmt.Errorf("collkit: rank %d: group send/recv: %w", c.Rank(), explain(ctx, err)))
	}
	return nil
}

// GroupAllReduce adds a typed all-reduce to g.
func GroupAllReduce[T Element](g *Group, send, recv []T, op Op) {
	g.AllReduce(dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv))
}

// GroupSend adds a typed send to g.
func GroupSend[T Element](g *Group, buf []T, peer int) { g.Send(dtypeOf[T](), reduce.Bytes(buf), peer) }

// GroupRecv adds a typed receive to g.
func GroupRecv[T Element](g *Group, buf []T, peer int) { g.Recv(dtypeOf[T](), reduce.Bytes(buf), peer) }
