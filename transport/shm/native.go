//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/internal/release"
	"github.com/collkit/collkit/internal/spin"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// native is the state of the native all-reduce.
type native struct {
	mu       sync.Mutex  // one at a time; Close waits for it (see allReduceLocked)
	chunks   uint64      // chunks done by every call so far: which half is next
	barriers uint64      // barriers passed by every call so far: the epoch
	err      error       // sticky: the barrier counters are out of step
	wake     *waker      // of this rank's barrier word
	wait     spin.Budget // how long a barrier polls before sleeping
	// touch is, while a call waits at its first barrier, the offset of
	// the last line of an inline payload that spans lines past the slot's
	// first (0: none): the barrier's polls load those lines of every peer
	// too, so that they come over together with the barrier word, not one
	// after another once it is seen (np 2, 64 B: 0.46-0.49 -> 0.44-0.46 us
	// a call; 128 B 0.54-0.57 -> 0.47-0.52). What the polls load goes to
	// sink, so that the compiler keeps the loads.
	touch int
	sink  uint64
	fence atomic.Uint64 // see wakePeers
	// hdr is this call's header as written to the slot, and own a copy of
	// an in-place inline payload: the call reads back neither from its own
	// shared lines. A peer that polled such a line took it from this core,
	// and loading it again waited for it to come back: a miss of about 100
	// ns in every 8-byte call (np 2, perf: 87% of firstBarrier's samples on
	// the load of this rank's own header word).
	hdr [transport.HeaderSize]byte
	// call is the header hdr encodes, for the barrier's published wait and
	// its check of late peers (zero before the first call: Connect's
	// store timing).
	call transport.Header
	own  [inlineMax]byte
}

// SmallNativeBytes and SmallNativeBytesMany are the largest buffers the
// native all-reduce reduces in one step, on 2 ranks and on more: every rank
// copies its buffer into its shared half, and after a single barrier
// reduces every rank's whole buffer into recv, in rank order, so that every
// rank computes the same bits. Above them the work is split among the ranks
// at the cost of a second barrier. A barrier costs more, and each rank's
// share of the work less, the more ranks there are: on 2 cores, 8 and 16
// KiB took 12-16 us in one step against 19-25 us in two on 3 ranks, 51-63
// against 76-104 us on 8, and the same either way at 32 KiB; on 2 ranks
// both took the same from 8 KiB, and one step was slower from 32 KiB.
const (
	SmallNativeBytes     = 4 << 10
	SmallNativeBytesMany = 16 << 10
)

// smallNativeBytes is SmallNativeBytes or SmallNativeBytesMany for n ranks.
func smallNativeBytes(n int) int {
	if n > 2 {
		return SmallNativeBytesMany
	}
	return SmallNativeBytes
}

// AllReduce reduces send over all ranks into recv without passing messages.
// Up to SmallNativeBytes (SmallNativeBytesMany above 2 ranks) it takes one
// barrier (see allReduceSmall). Larger buffers go through in chunks of half
// of Config.NativeBytes: every rank copies its chunk into its own shared
// buffer, all but its own 1/Size slice, which no other rank reads; then
// (after a barrier) it reduces that slice from its input and every peer's
// shared copy straight into recv and copies the result into its shared
// buffer; and (after a second barrier) it copies every other rank's reduced
// slice into recv. Measured on 2 cores, np 2, 4 MiB: 1298 us a call when a
// rank copied its own slice in and out of its buffer as well, 1135 without
// (the shared copy of its input and the copy out are work nobody needs).
// The two halves of the buffer alternate, so a rank fills the next chunk
// while slower ranks still read the last.
//
// The header is compared on every rank at the first barrier: ranks that
// call different operations get a *transport.MismatchError.
func (t *Transport) AllReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	n, r := t.cfg.Size, t.cfg.Rank
	if _, err := transport.CheckNative(transport.CollAllReduce, h, n, send, recv); err != nil {
		return fmt.Errorf("shm: rank %d: native all-reduce: %w", r, err)
	}
	if n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		reduce.Finish(h.DType, h.Op, recv, n)
		return nil
	}
	if t.cfg.NativeBytes == 0 {
		return fmt.Errorf("shm: rank %d: %w", r, ErrNoNative)
	}
	switch {
	case t.closed.Load():
		return fmt.Errorf("shm: rank %d: native all-reduce: %w", r, transport.ErrClosed)
	case !t.connected.Load():
		return fmt.Errorf("shm: rank %d: native all-reduce: %w", r, ErrNotConnected)
	}
	return t.allReduceLocked(ctx, h, send, recv)
}

// allReduceLocked runs one native all-reduce under native.mu, one at a
// time; Close takes native.mu before it unmaps the segments, so this lock
// alone keeps them mapped (t.mu's read lock besides it cost two more
// locked instructions a call). It unlocks without defer: with the returns
// of AllReduce, its defers would not be open-coded, which cost 2-3% of an
// 8-byte call.
func (t *Transport) allReduceLocked(ctx context.Context, h transport.Header, send, recv []byte) error {
	x := &t.native
	x.mu.Lock()
	var err error
	if t.closed.Load() {
		err = fmt.Errorf("shm: rank %d: native all-reduce: %w", t.cfg.Rank, transport.ErrClosed)
	} else if err = x.err; err != nil {
		err = fmt.Errorf("shm: rank %d: native all-reduce unusable after an earlier error; close the transport: %w", t.cfg.Rank, err)
	} else if err = t.allReduce(ctx, h, send, recv); err != nil {
		x.err = err
	}
	x.mu.Unlock()
	return err
}

// A call's slot: the call's first barrier word, its header and, for up to
// inlineMax bytes, the payload, all in the first cache line for the
// smallest payloads. A peer that sees the barrier word finds the rest in
// the line it just fetched (vader's fast boxes work the same way). The two
// slots alternate with the halves of the native buffer.
const (
	slotEpoch  = 0 // the call's first barrier
	slotHeader = 8
	slotData   = slotHeader + transport.HeaderSize
	inlineMax  = slotBytes - slotData
)

func slotOff(slot uint64) int { return offSlots + int(slot)*slotBytes }

func (t *Transport) allReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	own := t.segs[t.cfg.Rank]
	h.Len = 0
	slot := t.native.chunks % 2
	h.Encode(t.native.hdr[:])
	t.native.call = h
	copy(own.mem[slotOff(slot)+slotHeader:], t.native.hdr[:])
	half := t.cfg.NativeBytes / 2
	if len(send) <= min(half, smallNativeBytes(t.cfg.Size)) {
		return t.allReduceSmall(ctx, h, slot, send, recv)
	}
	n, r := t.cfg.Size, t.cfg.Rank
	es := h.DType.Size()
	chunkElems := half / es
	count := len(send) / es
	chunks := max(1, (count+chunkElems-1)/chunkElems)
	for c := range chunks {
		lo, hi := c*chunkElems, min(count, (c+1)*chunkElems)
		m := hi - lo
		view := t.nextHalf(m * es)
		mine := view(own)
		in, out := send[lo*es:hi*es], recv[lo*es:hi*es]
		slo, shi := r*m/n*es, (r+1)*m/n*es
		// Every slice but this rank's own, which only this rank reads.
		// Streaming stores where they are faster: every peer read this
		// half in an earlier call, and on some machines ordinary stores
		// first take each line back from its cache (2-core EPYC VM, np 2,
		// 256 KiB: 55 us a call, 27 us streamed; see Config.Stores).
		t.fill(mine[:slo], in[:slo])
		t.fill(mine[shi:], in[shi:])
		if c == 0 {
			if err := t.firstBarrier(ctx, h, slot); err != nil {
				return err
			}
		} else if err := t.barrier(ctx, offArrive); err != nil {
			return err
		}
		// This rank's slice, from its own input and every peer's copy,
		// straight into recv; then into the shared half for the peers,
		// with the same stores as the input (2-core EPYC VM, np 2,
		// alternating runs: 35 us a call at 256 KiB and 139 at 1 MiB with
		// ordinary stores here, 19.5 and 69 streamed; np 4, 1 MiB: 292-333
		// against 225-311). In place, recv's slice is send's, which no
		// peer reads.
		dst, first := out[slo:shi], in[slo:shi]
		for _, pr := range t.peers {
			if pr != nil {
				reduce.ReduceTo(h.DType, h.Op, dst, first, view(pr.seg)[slo:shi])
				first = dst
			}
		}
		reduce.Finish(h.DType, h.Op, dst, n)
		t.fill(mine[slo:shi], dst)
		if err := t.barrier(ctx, offArrive); err != nil {
			return err
		}
		// In place, the slices this overwrites were copied out before the
		// first barrier.
		for j, s := range t.segs {
			if j != r {
				jlo, jhi := j*m/n*es, (j+1)*m/n*es
				copy(out[jlo:jhi], view(s)[jlo:jhi])
			}
		}
	}
	return nil
}

// allReduceSmall is the one-barrier all-reduce of small buffers (see
// SmallNativeBytes): a rank writes the slot and half it uses again only
// after the first barrier of the next call, which every peer passes only
// once it has read this call's.
func (t *Transport) allReduceSmall(ctx context.Context, h transport.Header, slot uint64, send, recv []byte) error {
	r := t.cfg.Rank
	view := t.nextHalf(len(send))
	inline := len(send) <= inlineMax
	if inline {
		off := slotOff(slot) + slotData
		view = func(s *segment) []byte { return s.mem[off : off+len(send)] }
		t.native.touch = (off + len(send) - 1) &^ (lineBytes - 1)
	}
	copy(view(t.segs[r]), send)
	// This rank's own contribution, from private memory where it can be
	// (see native.hdr): send itself, unless recv is send and takes a
	// lower rank's buffer first.
	own := send
	if r > 0 && pipeline.SameBuffer(send, recv) {
		own = view(t.segs[r])
		if inline {
			own = t.native.own[:len(send)]
			copy(own, send)
		}
	}
	err := t.firstBarrier(ctx, h, slot)
	t.native.touch = 0
	if err != nil {
		return err
	}
	for j, s := range t.segs {
		b := own
		if j != r {
			b = view(s)
		}
		if j == 0 {
			copy(recv, b)
		} else {
			reduce.Reduce(h.DType, h.Op, recv, b)
		}
	}
	reduce.Finish(h.DType, h.Op, recv, t.cfg.Size)
	return nil
}

// nextHalf returns the view of the first size bytes of the next chunk's
// half of a segment's native buffer. The halves alternate, so a rank fills
// one while slower ranks still read the other.
func (t *Transport) nextHalf(size int) func(*segment) []byte {
	x := &t.native
	half := t.cfg.NativeBytes / 2
	area := t.lay.native() + int(x.chunks%2)*half
	x.chunks++
	return func(s *segment) []byte { return s.mem[area : area+size] }
}

// otherAlgorithm is a *transport.MismatchError when late peer pr runs this
// call with another algorithm: the native all-reduce sends nothing through
// the rings, so a message of this call's number waiting in pr's ring says
// that pr runs the call over the rings (its algorithm was set apart), and
// waits there for this rank, which waits at the barrier for it.
func (t *Transport) otherAlgorithm(pr *peer) error {
	want := t.native.call
	if want.Coll == 0 { // Connect's store timing: no call
		return nil
	}
	got, ok := pr.peek()
	if !ok || got.Seq != want.Seq || got.Comm != want.Comm || got.Coll == transport.CollAbort || got.Coll == transport.CollSendRecv {
		return nil // point-to-point messages number themselves per peer
	}
	want.Step, want.Len = got.Step, got.Len // per message
	return &transport.MismatchError{Peer: pr.rank, Want: want, Got: got}
}

// firstBarrier is a call's first barrier, on the word in its slot, after
// which it compares every peer's header in the slot with h.
func (t *Transport) firstBarrier(ctx context.Context, h transport.Header, slot uint64) error {
	off := slotOff(slot)
	if err := t.barrier(ctx, off+slotEpoch); err != nil {
		return err
	}
	mine := t.native.hdr[:]
	for _, pr := range t.peers {
		if pr == nil {
			continue
		}
		theirs := pr.seg.mem[off+slotHeader : off+slotData]
		if bytes.Equal(theirs, mine) {
			continue // the usual case, without decoding
		}
		got, err := transport.Decode(theirs)
		if err == nil {
			err = h.Check(pr.rank, got)
		}
		if err != nil {
			return fmt.Errorf("shm: rank %d: native all-reduce: %w", t.cfg.Rank,
				&transport.PeerError{Rank: pr.rank, Addr: pr.addr(), Op: "allreduce", Err: err})
		}
	}
	return nil
}

// wakePeers wakes the peers that sleep at the barrier whose word this
// rank has just published. A sleeper sets its flag, then looks at the
// word; this rank stores the word, then looks at the flags: so a full
// fence must part the store from the loads, or both can miss the other
// and the sleeper sleeps out its slice. The word is stored with a plain
// release store and the fence is a locked instruction on a private line:
// an XCHG of the shared word itself also fenced, but first took the line
// back from the peers that poll it (np 2, 8 B: 0.44-0.47 us a call against
// 0.41-0.44, alternating runs).
func (t *Transport) wakePeers() {
	t.native.fence.Add(1) // a locked instruction on a private line: a fence that moves no shared line
	for _, pr := range t.peers {
		if pr != nil {
			wake(pr.seg.u32(offBwait))
		}
	}
}

// barrier publishes, in the word at off of this rank's segment, that this
// rank reached the next barrier of the native all-reduce, and waits until
// every other rank has published it in theirs. Every barrier has a new
// number, so a word shows whether its rank has reached a barrier, whichever
// barrier it wrote last.
func (t *Transport) barrier(ctx context.Context, off int) error {
	t.native.barriers++
	epoch := t.native.barriers
	own := t.segs[t.cfg.Rank]
	raceSync()
	release.Uint64(own.u64(off), epoch) // not XCHG: see wakePeers
	t.wakePeers()
	next := 0 // peers below next have arrived
	touch := t.native.touch
	n := note{op: opBarrier, h: &t.native.call}
	ready := func() bool {
		for ; next < len(t.peers); next++ {
			pr := t.peers[next]
			if pr == nil {
				continue
			}
			for l := touch; l > off; l -= lineBytes {
				t.native.sink += pr.seg.u64(l).Load()
			}
			if pr.seg.u64(off).Load() < epoch {
				n.peer = next
				return false
			}
		}
		return true
	}
	var late *peer
	failed := func(live bool) error {
		for _, pr := range t.peers[next:] {
			if pr != nil && pr.seg.u64(off).Load() < epoch {
				late = pr
				if err := pr.gone(live); err != nil {
					return err
				}
				if live {
					if err := t.otherAlgorithm(pr); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if t.native.wake == nil {
		t.native.wake = t.newWaker(own.u32(offBwait))
	}
	if err := t.await(ctx, t.native.wake, &t.native.wait, &n, ready, failed); err != nil {
		if errors.Is(err, errClosed) {
			err = transport.ErrClosed
		}
		if late == nil {
			for _, pr := range t.peers {
				if pr != nil {
					late = pr
					break
				}
			}
		}
		return fmt.Errorf("shm: rank %d: native all-reduce: %w", t.cfg.Rank,
			&transport.PeerError{Rank: late.rank, Addr: late.addr(), Op: "allreduce", Err: fmt.Errorf("waiting at barrier %d: %w", epoch, err)})
	}
	raceSync()
	return nil
}
