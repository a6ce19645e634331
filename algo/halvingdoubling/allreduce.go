package halvingdoubling

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// Defaults for the zero fields of Config.
const (
	// DefaultDoublingMaxBytes is the largest buffer reduced by recursive
	// doubling when Config.DoublingMaxBytes is zero: below it the extra
	// log2(n) steps of Rabenseifner cost more than sending the whole buffer
	// in every step. The crossover is near 16 KiB in memory and near 64 KiB
	// over loopback TCP (BenchmarkCrossover, 4 and 8 ranks).
	DefaultDoublingMaxBytes = 32 << 10
	// DefaultDoublingMaxBytesPair replaces DefaultDoublingMaxBytes where the
	// power-of-two group has two ranks (2 or 3 ranks): there recursive
	// doubling sends as many bytes as Rabenseifner (the whole buffer once
	// against half of it twice) in one step instead of two, and pays with
	// reducing the whole buffer instead of half. Over loopback TCP at 2
	// ranks on 2 cores (medians of 4-5 alternating runs): 64 KiB 40.9
	// against 46.3 us, 128 KiB 79.9 against 95.3, 256 KiB 137 against 146;
	// even at 512 KiB (250 and 251), Rabenseifner ahead at 1 MiB.
	DefaultDoublingMaxBytesPair = 256 << 10
	// DefaultSegmentBytes is the largest message when Config.SegmentBytes is
	// zero: large enough that per-message costs vanish, small enough to stay
	// in cache between receive and reduce. As ring's (1 MiB took 0.8-0.95x
	// 256 KiB's time for 4 and 16 MiB all-reduces over loopback TCP at 2
	// and 4 ranks).
	DefaultSegmentBytes = 1 << 20
	// DefaultEagerBytes is the default Config.EagerBytes: below it, latency
	// matters more than overlapping the two directions of an exchange.
	DefaultEagerBytes = 64 << 10
)

// Config chooses between the sub-algorithms and tunes them. The zero value
// is ready to use. Every rank of a job must use the same DoublingMaxBytes and
// SegmentBytes; ranks that differ get a *transport.MismatchError, not wrong
// data.
type Config struct {
	// DoublingMaxBytes is the largest buffer, in bytes, reduced by recursive
	// doubling; larger buffers use Rabenseifner's reduce-scatter and
	// all-gather. Zero means DefaultDoublingMaxBytes, or
	// DefaultDoublingMaxBytesPair on 2 and 3 ranks; negative means
	// Rabenseifner for every size.
	DoublingMaxBytes int
	// SegmentBytes is the largest message sent; longer transfers are cut
	// into segments so that receiving and reducing overlap and staging
	// buffers stay small. Zero means DefaultSegmentBytes.
	SegmentBytes int
	// EagerBytes is the largest buffer run on one goroutine (each exchange
	// sends, then receives) over transports that buffer it
	// (transport.Buffered); larger ones send on a helper goroutine so that
	// both directions of an exchange overlap. Zero means DefaultEagerBytes;
	// negative disables the one-goroutine path.
	EagerBytes int
}

// doublingMaxBytes is the largest buffer reduced by recursive doubling in a
// power-of-two group of p ranks.
func (c Config) doublingMaxBytes(p int) int {
	if c.DoublingMaxBytes == 0 {
		if p == 2 {
			return DefaultDoublingMaxBytesPair
		}
		return DefaultDoublingMaxBytes
	}
	return c.DoublingMaxBytes
}

func (c Config) eagerBytes() int { return cmp.Or(c.EagerBytes, DefaultEagerBytes) }

// AllReduce runs a halving-doubling all-reduce with the default Config.
func AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	return Config{}.AllReduce(ctx, t, h, send, recv)
}

// AllReduce reduces send over all ranks of t into recv, with h.DType and h.Op.
// send and recv have the same length, a multiple of the element size; they may
// be the same slice (in place), and send is otherwise never written. h
// describes the operation; the algorithm sets Step and Len on each message.
// Every rank ends with the same bits.
func (c Config) AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	es, err := pipeline.CheckAllReduce(h, send, recv)
	if err != nil {
		return fmt.Errorf("halvingdoubling: %w", err)
	}
	if len(send) == 0 {
		return dissemination.Agree(ctx, t, h) // an empty all-reduce still takes part
	}
	if pipeline.AllReduceAlone(n, h, send, recv) {
		return nil
	}
	seg := pipeline.SegmentBytes(c.SegmentBytes, DefaultSegmentBytes, es)
	p := 1 << (bits.Len(uint(n)) - 1)
	o := allReduce{
		t: t, h: h, n: n, rank: r, es: es, seg: seg, send: send, recv: recv,
		p: p, rem: n - p, doubling: len(send) <= c.doublingMaxBytes(p),
	}
	// Each peer gets at most len(send) bytes from one all-reduce.
	o.eager = pipeline.Eager(t, len(send), c.eagerBytes())
	return o.run(ctx)
}

// allReduce is one all-reduce on one rank.
type allReduce struct {
	t          transport.Transport
	h          transport.Header
	n, rank    int
	es, seg    int
	send, recv []byte
	p, rem     int  // largest power of two <= n, and n - p
	doubling   bool // recursive doubling, else Rabenseifner
	eager      bool // every exchange sends, then receives, on this goroutine
	stage      []byte
	tx         *sender // the helper that sends while this goroutine receives; nil when eager
}

// Step kinds, the top bits of Header.Step. The two sub-algorithms use
// different kinds, so ranks that chose differently fail the header check.
const (
	kindFold uint32 = iota + 1
	kindDoubling
	kindHalving
	kindGather
	kindUnfold
)

// stepID is Header.Step for segment seg of round round of a phase: 3 bits of
// kind, 5 of round, 24 of segment (wrapping; a lost message is still caught
// by the next one's number).
func stepID(kind uint32, round, seg int) uint32 {
	return kind<<29 | uint32(round&0x1f)<<24 | uint32(seg)&0xffffff
}

var phaseNames = [...]string{
	kindFold:     "fold",
	kindDoubling: "recursive doubling",
	kindHalving:  "reduce-scatter",
	kindGather:   "all-gather",
	kindUnfold:   "unfold",
}

// real maps a rank of the power-of-two group back to a rank of t: the first
// rem of them are the odd ranks of the first 2*rem, which hold their even
// neighbour's input too; the rest are the ranks from 2*rem on.
func (o *allReduce) real(v int) int {
	if v < o.rem {
		return 2*v + 1
	}
	return v + o.rem
}

func (o *allReduce) run(ctx context.Context) error {
	// Fold: the first 2*rem ranks pair up; each even one hands its input to
	// its odd neighbour and waits for the result.
	var v int
	switch {
	case o.rank < 2*o.rem && o.rank%2 == 0:
		return o.sitOut(ctx)
	case o.rank < 2*o.rem:
		v = o.rank / 2
	default:
		v = o.rank - o.rem
	}
	stage := pipeline.Stage(o.seg)
	defer pipeline.Release(stage)
	o.stage = stage.B

	src := o.send
	if o.rank < 2*o.rem {
		// The even neighbour's input is the left operand: lower ranks always
		// come first, so every rank reduces in the same order.
		x := exchange{peer: o.rank - 1, kind: kindFold, in: o.recv, mine: o.send}
		if err := o.exchange(ctx, &x); err != nil {
			return o.fail(&x, err)
		}
		src = o.recv
	}

	var crew *pipeline.Crew
	rctx := ctx // the rounds' context
	if !o.eager {
		crew = pipeline.StartCrew(ctx)
		rctx = crew.Context()
		o.tx = startSender(crew, o.t)
	}
	var err error
	if o.doubling {
		err = o.recursiveDoubling(rctx, v, src)
	} else {
		err = o.rabenseifner(rctx, v, src)
	}
	if crew != nil {
		o.tx.stop()
		err = crew.Wait(err)
		crew.Release()
		o.tx.release()
		o.tx = nil
	}
	if err != nil {
		return err
	}

	if o.rank < 2*o.rem {
		x := exchange{peer: o.rank - 1, kind: kindUnfold, out: o.recv}
		if err := o.exchange(ctx, &x); err != nil {
			return o.fail(&x, err)
		}
	}
	return nil
}

// sitOut is the whole all-reduce of an even rank below 2*rem: send the input
// to the odd neighbour, receive the result from it.
func (o *allReduce) sitOut(ctx context.Context) error {
	x := exchange{peer: o.rank + 1, kind: kindFold, out: o.send}
	if err := o.exchange(ctx, &x); err != nil {
		return o.fail(&x, err)
	}
	x = exchange{peer: o.rank + 1, kind: kindUnfold, in: o.recv}
	if err := o.exchange(ctx, &x); err != nil {
		return o.fail(&x, err)
	}
	return nil
}

// recursiveDoubling: in round k, exchange the whole buffer with group rank
// v^2^k and reduce, lower group first. After log2(p) rounds every rank holds
// the same result, computed by the same tree.
func (o *allReduce) recursiveDoubling(ctx context.Context, v int, src []byte) error {
	for k := 0; 1<<k < o.p; k++ {
		q := v ^ 1<<k
		x := exchange{
			peer: o.real(q), kind: kindDoubling, round: k,
			out: src, in: o.recv, mine: src, lower: v < q,
			hazard: pipeline.SameBuffer(src, o.recv),
		}
		if err := o.exchange(ctx, &x); err != nil {
			return o.fail(&x, err)
		}
		src = o.recv
	}
	reduce.Finish(o.h.DType, o.h.Op, o.recv, o.n)
	return nil
}

// rabenseifner: a reduce-scatter by recursive halving (in round i, keep the
// half of the current range on the side of bit i of v, send the other half to
// v^2^i and reduce what comes back into the kept half), then an all-gather by
// recursive doubling that retraces the rounds backwards.
func (o *allReduce) rabenseifner(ctx context.Context, v int, src []byte) error {
	rounds := bits.Len(uint(o.p)) - 1
	// lo[i], hi[i] is the element range both partners of round i start from;
	// lo[rounds], hi[rounds] is the block this rank finishes.
	var lo, hi [bits.UintSize]int
	lo[0], hi[0] = 0, len(o.recv)/o.es
	es := o.es
	for i := range rounds {
		q := v ^ 1<<i
		mid := lo[i] + (hi[i]-lo[i])/2
		keepLo, keepHi, sendLo, sendHi := lo[i], mid, mid, hi[i]
		if v&(1<<i) != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, hi[i], lo[i], mid
		}
		x := exchange{
			peer: o.real(q), kind: kindHalving, round: i,
			out:  src[sendLo*es : sendHi*es],
			in:   o.recv[keepLo*es : keepHi*es],
			mine: src[keepLo*es : keepHi*es], lower: v < q,
		}
		if err := o.exchange(ctx, &x); err != nil {
			return o.fail(&x, err)
		}
		lo[i+1], hi[i+1] = keepLo, keepHi
		src = o.recv
	}
	reduce.Finish(o.h.DType, o.h.Op, o.recv[lo[rounds]*es:hi[rounds]*es], o.n)
	for i := rounds - 1; i >= 0; i-- {
		q := v ^ 1<<i
		theirLo, theirHi := hi[i+1], hi[i]
		if v&(1<<i) != 0 {
			theirLo, theirHi = lo[i], lo[i+1]
		}
		x := exchange{
			peer: o.real(q), kind: kindGather, round: i,
			out: o.recv[lo[i+1]*es : hi[i+1]*es],
			in:  o.recv[theirLo*es : theirHi*es],
		}
		if err := o.exchange(ctx, &x); err != nil {
			return o.fail(&x, err)
		}
	}
	return nil
}

// exchange is one round with one peer: send out (if any) and receive into in
// (if any). When mine is set, in becomes mine op received (lower) or
// received op mine; otherwise the received bytes are copied into in. Both
// partners cut their transfers into segments the same way.
type exchange struct {
	peer   int
	kind   uint32
	round  int
	out    []byte
	in     []byte
	mine   []byte
	lower  bool
	hazard bool // in aliases out: reduce a segment only once it has been sent
}

func (o *allReduce) exchange(ctx context.Context, x *exchange) error {
	h := o.h
	h.Step = stepID(x.kind, x.round, 0)
	if o.tx == nil || len(x.out) == 0 || len(x.in) == 0 {
		if err := sendSegments(ctx, o.t, x.peer, h, x.out, o.seg, nil); err != nil {
			return err
		}
		return o.receive(ctx, x, h, nil)
	}
	o.tx.post(x.peer, h, x.out, o.seg)
	recvErr := o.receive(ctx, x, h, &o.tx.sent)
	if recvErr != nil {
		o.tx.crew.Fail() // unblock the sender
	}
	sendErr := <-o.tx.done
	if sendErr != nil && (recvErr == nil || pipeline.Canceled(recvErr)) {
		return sendErr
	}
	return recvErr
}

// receive takes x's incoming segments. sent, when not nil, counts the
// segments of x.out already sent, for x.hazard.
func (o *allReduce) receive(ctx context.Context, x *exchange, h transport.Header, sent *pipeline.Progress) error {
	base := h.Step
	dt, rop := o.h.DType, o.h.Op
	for j, off := 0, 0; off < len(x.in); j, off = j+1, off+o.seg {
		end := min(off+o.seg, len(x.in))
		h.Step = base | uint32(j)&0xffffff
		if x.mine == nil {
			if err := o.t.Recv(ctx, x.peer, h, x.in[off:end]); err != nil {
				return err
			}
			continue
		}
		// Out of place, the first round's (and the fold's) mine is send
		// and in is recv, which no send of the round reads: the bytes can
		// land in recv and be reduced there. Through the staging buffer,
		// recv's lines were first fetched only to be overwritten, a fourth
		// stream of memory traffic beside send, the staged bytes and the
		// result's (4 ranks on 2 cores, 16 MiB: 33.2 ms a call against
		// 30.6 straight into recv).
		in := o.stage[:end-off]
		if !pipeline.SameBuffer(x.in, x.mine) {
			in = x.in[off:end]
		}
		if err := o.t.Recv(ctx, x.peer, h, in); err != nil {
			return err
		}
		if x.hazard && sent != nil {
			if err := sent.Wait(ctx, int64(j+1)); err != nil {
				return err
			}
		}
		done := pipeline.Span(o.t, "reduce", h.Step)
		if x.lower {
			reduce.ReduceTo(dt, rop, x.in[off:end], x.mine[off:end], in)
		} else {
			reduce.ReduceTo(dt, rop, x.in[off:end], in, x.mine[off:end])
		}
		done()
	}
	return nil
}

func (o *allReduce) fail(x *exchange, err error) error {
	return fmt.Errorf("halvingdoubling: %s round %d with rank %d: %w", phaseNames[x.kind], x.round, x.peer, err)
}
