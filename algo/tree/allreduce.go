package tree

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// DefaultSegmentBytes is the pipelining unit when Config.SegmentBytes is
// zero. A tree needs more segments than a ring to fill its pipeline (a
// segment waits for 2*log2(n) hops), so it is smaller than the ring's.
const DefaultSegmentBytes = 128 << 10

// DefaultEagerBytes is the default Config.EagerBytes: below it, latency
// matters more than overlapping the trees' sends and receives.
const DefaultEagerBytes = 64 << 10

// Config tunes the double binary tree. The zero value is ready to use.
type Config struct {
	// SegmentBytes is the largest message the trees send; each tree's half
	// of the buffer is cut into segments of this size, which move up and
	// down the tree as soon as they are ready. Zero means
	// DefaultSegmentBytes.
	SegmentBytes int
	// EagerBytes is the largest buffer run on one goroutine over transports
	// that buffer everything it sends (transport.Buffered); larger ones run
	// each tree's reduce and broadcast on goroutines of their own so they
	// overlap. Zero means DefaultEagerBytes; negative disables the
	// one-goroutine path.
	EagerBytes int
}

func (c Config) eagerBytes() int { return cmp.Or(c.EagerBytes, DefaultEagerBytes) }

// AllReduce runs a double binary tree all-reduce with the default Config.
func AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	return Config{}.AllReduce(ctx, t, h, send, recv)
}

// AllReduce reduces send over all ranks of t into recv, with h.DType and h.Op.
// send and recv have the same length, a multiple of the element size; they may
// be the same slice (in place). send is never written otherwise. h describes
// the operation; the trees set Step and Len on each message.
func (c Config) AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	es, err := pipeline.CheckAllReduce(h, send, recv)
	if err != nil {
		return fmt.Errorf("tree: %w", err)
	}
	if pipeline.AllReduceAlone(n, h, send, recv) {
		return nil
	}
	seg := pipeline.SegmentBytes(c.SegmentBytes, DefaultSegmentBytes, es)
	p := newPlan(n, r, es, len(send)/es, seg)
	if pipeline.Eager(t, len(send), c.eagerBytes()) {
		return p.sequential(ctx, t, h, send, recv)
	}
	return p.pipelined(ctx, t, h, send, recv)
}

// Phases of a tree, numbered as in the message steps.
const (
	up   = 0 // reduce toward the root
	down = 1 // broadcast from the root
)

// step is the Step of segment k of tree tr in phase ph: each tree and phase
// has a range of its own (the top two bits), so messages of different trees
// or phases are never taken for each other, and consecutive segments
// differ, so a lost message fails the next header check.
func step(tr, ph, k int) uint32 {
	return uint32(2*tr+ph)<<30 | uint32(k)&(1<<30-1)
}

var phaseNames = [2]string{"reduce", "broadcast"}

// plan is the shape of one all-reduce on one rank.
type plan struct {
	n, r, seg int
	height    int // of both trees
	halves    [2]half
}

// half is one tree's part: the bytes it reduces and this rank's place in it.
type half struct {
	lo, hi int // byte range of the buffer
	segs   int
	node
}

func newPlan(n, r, es, count, seg int) plan {
	p := plan{n: n, r: r, seg: seg, height: treeHeight(n)}
	split := (count + 1) / 2 * es // tree 0 takes the odd element
	for tr, rng := range [2][2]int{{0, split}, {split, count * es}} {
		// Each tree carries at least one segment, empty when its half is
		// (count 0 or 1): every call runs both trees, so every rank hears
		// from every rank, and ranks whose counts differ meet each other's
		// header where they expect theirs.
		segs := max(1, (rng[1]-rng[0]+seg-1)/seg)
		p.halves[tr] = half{lo: rng[0], hi: rng[1], segs: segs, node: place(n, tr, r)}
	}
	return p
}

// bounds is the byte range of segment k of tree tr.
func (p *plan) bounds(tr, k int) (lo, hi int) {
	hf := &p.halves[tr]
	lo = hf.lo + k*p.seg
	return lo, min(lo+p.seg, hf.hi)
}

func (p *plan) maxSegs() int { return max(p.halves[0].segs, p.halves[1].segs) }

// The hop at which a message leaves in a network where every hop takes one
// unit: a reduce message when its sender has heard from all its children,
// which is the sender's height; a broadcast message to a node at depth d
// when the root's result has come down d-1 levels. These times order the
// messages of the two trees on a link they share (see the package doc).

// upTime is when this rank's reduce message of tree tr leaves for its parent.
func (p *plan) upTime(tr int) int { return p.halves[tr].height }

// downTime is when this rank's broadcast message of tree tr leaves for its
// children.
func (p *plan) downTime(tr int) int { return p.height + p.halves[tr].depth }

// inTime is when the broadcast message of tree tr left this rank's parent.
func (p *plan) inTime(tr int) int { return p.downTime(tr) - 1 }

// reduceIn reduces segment [lo,hi) of tree tr, received from the i-th
// child into in, into recv: the first child's with this rank's own input,
// the next ones with the partial result. At the root, the last one
// completes the result.
func (p *plan) reduceIn(h transport.Header, tr, i, lo, hi int, send, recv, in []byte) {
	nd := &p.halves[tr].node
	if i == 0 {
		reduce.ReduceTo(h.DType, h.Op, recv[lo:hi], send[lo:hi], in)
	} else {
		reduce.Reduce(h.DType, h.Op, recv[lo:hi], in)
	}
	if i == nd.nchild-1 && nd.parent < 0 {
		reduce.Finish(h.DType, h.Op, recv[lo:hi], p.n)
	}
}

// upSource is what this rank sends up tree tr: its input at a leaf, the
// partial result it reduced elsewhere.
func (p *plan) upSource(tr int, send, recv []byte) []byte {
	if p.halves[tr].nchild == 0 {
		return send
	}
	return recv
}

// An op is one message this rank sends or receives per segment.
type op struct {
	time  int  // the hop: a send leaves at it, a receive completes at it
	recv  bool // receives come before sends of the same hop
	tree  int
	phase int
	peer  int
	child int // index among the children, for reduce receives and broadcast sends
}

func (a op) before(b op) bool {
	switch {
	case a.time != b.time:
		return a.time < b.time
	case a.recv != b.recv:
		return a.recv
	case a.tree != b.tree:
		return a.tree < b.tree
	}
	return a.peer < b.peer
}

// ops lists this rank's messages of one segment in the order the
// one-goroutine path runs them: by hop, receives first, then tree and peer.
// They are at most 12: per tree two children and a parent, each both ways.
func (p *plan) ops() (list [12]op, n int) {
	add := func(o op) {
		list[n] = o
		n++
	}
	for tr := range p.halves {
		hf := &p.halves[tr]
		if hf.segs == 0 {
			continue
		}
		for i := range hf.nchild {
			add(op{time: hf.heights[i] + 1, recv: true, tree: tr, phase: up, peer: hf.children[i], child: i})
		}
		if hf.parent >= 0 {
			add(op{time: p.upTime(tr), tree: tr, phase: up, peer: hf.parent})
			add(op{time: p.inTime(tr) + 1, recv: true, tree: tr, phase: down, peer: hf.parent})
		}
		for i := range hf.nchild {
			add(op{time: p.downTime(tr), tree: tr, phase: down, peer: hf.children[i], child: i})
		}
	}
	for i := 1; i < n; i++ { // insertion sort
		for j := i; j > 0 && list[j].before(list[j-1]); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
	return list, n
}

// sequential runs both trees on one goroutine, segment by segment, each
// segment's messages in the order of their hops. Every Send must complete
// without its receiver, which the caller checks (transport.Buffered): two
// ranks that send each other messages leaving at the same hop both send
// before they receive.
func (p *plan) sequential(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	all, nops := p.ops()
	ops := all[:nops]
	stage := pipeline.Stage(p.seg)
	defer pipeline.Release(stage)
	for k := range p.maxSegs() {
		for _, o := range ops {
			if k >= p.halves[o.tree].segs {
				continue
			}
			lo, hi := p.bounds(o.tree, k)
			h.Step = step(o.tree, o.phase, k)
			var err error
			switch {
			case o.phase == up && o.recv:
				in := stage.B[:hi-lo]
				if err = t.Recv(ctx, o.peer, h, in); err == nil {
					done := pipeline.Span(t, "reduce", h.Step)
					p.reduceIn(h, o.tree, o.child, lo, hi, send, recv, in)
					done()
				}
			case o.phase == up:
				err = t.Send(ctx, o.peer, h, p.upSource(o.tree, send, recv)[lo:hi])
			case o.recv:
				err = t.Recv(ctx, o.peer, h, recv[lo:hi])
			default:
				err = t.Send(ctx, o.peer, h, recv[lo:hi])
			}
			if err != nil {
				return p.wrap(o.tree, o.phase, k, err)
			}
		}
	}
	return nil
}

func (p *plan) wrap(tr, ph, k int, err error) error {
	return fmt.Errorf("tree %d %s, segment %d/%d: %w", tr, phaseNames[ph], k, p.halves[tr].segs, err)
}

// run is one pipelined all-reduce in progress: for each tree, up to four
// goroutines (receive and reduce from the children, send to the parent,
// receive from the parent, send to the children) linked by pipeline.Progress
// counters, and gates that order the two trees' messages on links both use.
// Runs are reused, so that a steady stream of all-reduces allocates nothing.
type run struct {
	p          plan
	t          transport.Transport
	h          transport.Header
	send, recv []byte
	ctx        context.Context

	reduced [2]pipeline.Progress // segments of each tree reduced from the children (finished at the root)
	arrived [2]pipeline.Progress // segments of each tree received from the parent

	// Gates of the links this rank shares between the trees, nil where only
	// one tree uses the link: toParent[tr], fromParent[tr], toChild[tr][i],
	// fromChild[tr][i]. They point into gates.
	toParent, fromParent [2]*gate
	toChild, fromChild   [2][2]*gate
	gates                [6]gate // a link per use of tree 0: at most 6
	ngates               int

	jobs [8]job
}

// job is one of a run's goroutines, as a crew's Job.
type job struct {
	x    *run
	tree int
	kind int
}

// Kinds of job.
const (
	fromChildren = iota
	toChildren
	toParent
	fromParent
)

func (j *job) Run(ctx context.Context) error {
	switch j.kind {
	case fromChildren:
		return j.x.reduceFromChildren(j.tree)
	case toChildren:
		return j.x.broadcastToChildren(j.tree)
	case toParent:
		return j.x.sendToParent(j.tree)
	}
	return j.x.recvFromParent(j.tree)
}

var runs = sync.Pool{New: func() any { return new(run) }}

func (p *plan) pipelined(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	crew := pipeline.StartCrew(ctx)
	defer crew.Release()
	x := runs.Get().(*run)
	defer x.release()
	x.p, x.t, x.h, x.send, x.recv, x.ctx = *p, t, h, send, recv, crew.Context()
	for tr := range x.reduced {
		x.reduced[tr].Init()
		x.arrived[tr].Init()
	}
	x.connectGates()

	list := x.jobs[:0]
	for tr := range p.halves {
		hf := &p.halves[tr]
		if hf.segs == 0 {
			continue
		}
		if hf.nchild > 0 {
			list = append(list, job{x, tr, fromChildren}, job{x, tr, toChildren})
		}
		if hf.parent >= 0 {
			list = append(list, job{x, tr, toParent}, job{x, tr, fromParent})
		}
	}
	for i := range list[1:] {
		crew.Go(&list[1+i])
	}
	return crew.Wait(list[0].Run(x.ctx))
}

// release gives x back, with nothing of the caller's left in it.
func (x *run) release() {
	x.t, x.send, x.recv, x.ctx = nil, nil, nil, nil
	x.toParent, x.fromParent = [2]*gate{}, [2]*gate{}
	x.toChild, x.fromChild = [2][2]*gate{}, [2][2]*gate{}
	runs.Put(x)
}

// connectGates makes a gate for every directed link that both trees use.
func (x *run) connectGates() {
	type use struct {
		out        bool // this rank sends on the link, or receives
		peer, time int  // the other end; the hop the message leaves at
		g          **gate
	}
	var uses [2][6]use
	var nuse [2]int
	add := func(tr int, u use) {
		uses[tr][nuse[tr]] = u
		nuse[tr]++
	}
	for tr := range x.p.halves {
		hf := &x.p.halves[tr]
		if hf.segs == 0 {
			continue
		}
		if hf.parent >= 0 {
			add(tr, use{true, hf.parent, x.p.upTime(tr), &x.toParent[tr]})
			add(tr, use{false, hf.parent, x.p.inTime(tr), &x.fromParent[tr]})
		}
		for i := range hf.nchild {
			add(tr, use{true, hf.children[i], x.p.downTime(tr), &x.toChild[tr][i]})
			add(tr, use{false, hf.children[i], hf.heights[i], &x.fromChild[tr][i]})
		}
	}
	both := min(x.p.halves[0].segs, x.p.halves[1].segs)
	x.ngates = 0
	for _, a := range uses[0][:nuse[0]] {
		for _, b := range uses[1][:nuse[1]] {
			if a.out != b.out || a.peer != b.peer {
				continue
			}
			g := &x.gates[x.ngates]
			x.ngates++
			g.reset(both)
			if b.time < a.time {
				g.first = 1
			}
			*a.g, *b.g = g, g
		}
	}
}

// reduceFromChildren receives each segment of tree tr from the children and
// reduces it into recv.
func (x *run) reduceFromChildren(tr int) error {
	p, hf := &x.p, &x.p.halves[tr]
	stage := pipeline.Stage(p.seg)
	defer pipeline.Release(stage)
	h := x.h
	for k := range hf.segs {
		lo, hi := p.bounds(tr, k)
		h.Step = step(tr, up, k)
		in := stage.B[:hi-lo]
		for i := range hf.nchild {
			g := x.fromChild[tr][i]
			err := g.enter(x.ctx, tr, k)
			if err == nil {
				err = x.t.Recv(x.ctx, hf.children[i], h, in)
			}
			if err != nil {
				return p.wrap(tr, up, k, err)
			}
			g.leave(tr)
			done := pipeline.Span(x.t, "reduce", h.Step)
			p.reduceIn(h, tr, i, lo, hi, x.send, x.recv, in)
			done()
		}
		x.reduced[tr].Add()
	}
	return nil
}

// sendToParent sends each segment of tree tr up as soon as it is reduced.
func (x *run) sendToParent(tr int) error {
	p, hf := &x.p, &x.p.halves[tr]
	src := p.upSource(tr, x.send, x.recv)
	g := x.toParent[tr]
	h := x.h
	for k := range hf.segs {
		lo, hi := p.bounds(tr, k)
		h.Step = step(tr, up, k)
		var err error
		if hf.nchild > 0 {
			err = x.reduced[tr].Wait(x.ctx, int64(k+1))
		}
		if err == nil {
			err = g.enter(x.ctx, tr, k)
		}
		if err == nil {
			err = x.t.Send(x.ctx, hf.parent, h, src[lo:hi])
		}
		if err != nil {
			return p.wrap(tr, up, k, err)
		}
		g.leave(tr)
	}
	return nil
}

// recvFromParent receives each segment of tree tr's result into recv.
func (x *run) recvFromParent(tr int) error {
	p, hf := &x.p, &x.p.halves[tr]
	g := x.fromParent[tr]
	h := x.h
	for k := range hf.segs {
		lo, hi := p.bounds(tr, k)
		h.Step = step(tr, down, k)
		err := g.enter(x.ctx, tr, k)
		if err == nil {
			err = x.t.Recv(x.ctx, hf.parent, h, x.recv[lo:hi])
		}
		if err != nil {
			return p.wrap(tr, down, k, err)
		}
		g.leave(tr)
		x.arrived[tr].Add()
	}
	return nil
}

// broadcastToChildren sends each segment of tree tr's result down as soon as
// this rank has it: from its own reduction at the root, from the parent
// elsewhere.
func (x *run) broadcastToChildren(tr int) error {
	p, hf := &x.p, &x.p.halves[tr]
	ready := &x.arrived[tr]
	if hf.parent < 0 {
		ready = &x.reduced[tr]
	}
	h := x.h
	for k := range hf.segs {
		lo, hi := p.bounds(tr, k)
		h.Step = step(tr, down, k)
		if err := ready.Wait(x.ctx, int64(k+1)); err != nil {
			return p.wrap(tr, down, k, err)
		}
		for i := range hf.nchild {
			g := x.toChild[tr][i]
			err := g.enter(x.ctx, tr, k)
			if err == nil {
				err = x.t.Send(x.ctx, hf.children[i], h, x.recv[lo:hi])
			}
			if err != nil {
				return p.wrap(tr, down, k, err)
			}
			g.leave(tr)
		}
	}
	return nil
}

// gate orders the messages of the two trees on one directed link that both
// use: segment by segment, within a segment the tree whose message leaves
// at the earlier hop first (tree 0 on a tie), and past the last segment of
// the shorter half the longer one's alone. Both ends of the link compute
// the same order, so each Recv matches the next message, and at most one
// Send and one Recv per peer are in flight. A nil gate lets everything
// through.
type gate struct {
	first int // the tree that goes first within a segment
	both  int // segments that both trees have
	next  atomic.Int64
	wake  [2]chan struct{} // wake[tr]: the other tree has taken its turn
}

// reset readies g for a new run with both segments in both trees, tree 0
// first.
func (g *gate) reset(both int) {
	g.first, g.both = 0, both
	g.next.Store(0)
	for i := range g.wake {
		if g.wake[i] == nil {
			g.wake[i] = make(chan struct{}, 1)
		}
		select {
		case <-g.wake[i]:
		default:
		}
	}
}

func (g *gate) ticket(tr, k int) int64 {
	if k < g.both {
		if tr == g.first {
			return int64(2 * k)
		}
		return int64(2*k + 1)
	}
	return int64(g.both + k)
}

// enter waits for tree tr's turn for segment k.
func (g *gate) enter(ctx context.Context, tr, k int) error {
	if g == nil {
		return nil
	}
	want := g.ticket(tr, k)
	for g.next.Load() != want {
		select {
		case <-g.wake[tr]:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// leave passes the turn on after tree tr's message.
func (g *gate) leave(tr int) {
	if g == nil {
		return
	}
	g.next.Add(1)
	select {
	case g.wake[1-tr] <- struct{}{}:
	default:
	}
}
