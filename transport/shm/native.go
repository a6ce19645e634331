//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// native is the state of the native all-reduce.
type native struct {
	mu     sync.Mutex // one at a time
	chunks uint64     // chunks done by every call so far: the barrier epoch
	err    error      // sticky: the barrier counters are out of step
}

// AllReduce reduces send over all ranks into recv without passing messages.
// The buffer goes through in chunks of half of Config.NativeBytes: every
// rank copies its chunk into its own shared buffer, then (after a barrier)
// reduces its 1/Size slice of the chunk straight out of every rank's shared
// buffer, in place into its own, and (after a second barrier) copies every
// rank's reduced slice into recv. The two halves of the buffer alternate,
// so a rank fills the next chunk while slower ranks still read the last.
//
// The header is compared on every rank at the first barrier: ranks that
// call different operations get a *transport.MismatchError.
func (t *Transport) AllReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	n, r := t.cfg.Size, t.cfg.Rank
	if _, err := pipeline.CheckAllReduce(h, send, recv); err != nil {
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
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed.Load() {
		return fmt.Errorf("shm: rank %d: native all-reduce: %w", r, transport.ErrClosed)
	}
	x := &t.native
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return fmt.Errorf("shm: rank %d: native all-reduce unusable after an earlier error; close the transport: %w", r, x.err)
	}
	if err := t.allReduce(ctx, h, send, recv); err != nil {
		x.err = err
		return err
	}
	return nil
}

func (t *Transport) allReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	n, r := t.cfg.Size, t.cfg.Rank
	es := h.DType.Size()
	own := t.segs[r]
	h.Len = 0
	h.Encode(own.mem[offNativeHdr : offNativeHdr+transport.HeaderSize])

	half := t.cfg.NativeBytes / 2
	chunkElems := half / es
	count := len(send) / es
	chunks := max(1, (count+chunkElems-1)/chunkElems)
	x := &t.native
	for c := range chunks {
		g := x.chunks
		x.chunks++
		lo, hi := c*chunkElems, min(count, (c+1)*chunkElems)
		m := hi - lo
		area := t.lay.native() + int(g%2)*half
		view := func(s *segment) []byte { return s.mem[area : area+m*es] }
		mine := view(own)
		copy(mine, send[lo*es:hi*es])
		if err := t.barrier(ctx, 2*g+1); err != nil {
			return err
		}
		if c == 0 {
			for _, pr := range t.peers {
				if pr == nil {
					continue
				}
				got, err := transport.Decode(pr.seg.mem[offNativeHdr : offNativeHdr+transport.HeaderSize])
				if err == nil {
					err = h.Check(pr.rank, got)
				}
				if err != nil {
					return fmt.Errorf("shm: rank %d: native all-reduce: %w", r,
						&transport.PeerError{Rank: pr.rank, Addr: pr.addr(), Op: "allreduce", Err: err})
				}
			}
		}
		slo, shi := r*m/n*es, (r+1)*m/n*es
		for _, pr := range t.peers {
			if pr != nil {
				reduce.Reduce(h.DType, h.Op, mine[slo:shi], view(pr.seg)[slo:shi])
			}
		}
		reduce.Finish(h.DType, h.Op, mine[slo:shi], n)
		if err := t.barrier(ctx, 2*g+2); err != nil {
			return err
		}
		out := recv[lo*es : hi*es]
		for j, s := range t.segs {
			jlo, jhi := j*m/n*es, (j+1)*m/n*es
			copy(out[jlo:jhi], view(s)[jlo:jhi])
		}
	}
	return nil
}

// barrier publishes that this rank reached epoch and waits until every
// other rank has.
func (t *Transport) barrier(ctx context.Context, epoch uint64) error {
	own := t.segs[t.cfg.Rank]
	raceSync()
	own.u64(offArrive).Store(epoch)
	for _, pr := range t.peers {
		if pr != nil {
			wake(pr.seg.u32(offBwait))
		}
	}
	next := 0 // peers below next have arrived
	ready := func() bool {
		for ; next < len(t.peers); next++ {
			if pr := t.peers[next]; pr != nil && pr.seg.u64(offArrive).Load() < epoch {
				return false
			}
		}
		return true
	}
	var late *peer
	failed := func(live bool) error {
		for _, pr := range t.peers[next:] {
			if pr != nil && pr.seg.u64(offArrive).Load() < epoch {
				late = pr
				if err := pr.gone(live); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := t.await(ctx, own.u32(offBwait), ready, failed); err != nil {
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
