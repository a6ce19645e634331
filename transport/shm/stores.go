//go:build linux

package shm

import (
	"context"
	"fmt"
	"time"

	"github.com/collkit/collkit/internal/stream"
)

// Calibration of Config.Stores's StoresAuto: after an untimed round each
// way (the first touches of the ring's pages fault them in), storesRounds
// timed rounds each way, alternating, of storesIters fills of storesBytes.
const (
	storesBytes  = 256 << 10
	storesIters  = 4
	storesRounds = 3
)

// chooseStores settles whether this rank streams what its peers read next
// (Config.Stores). Every rank, in step with the others, fills the start of
// its right neighbour's ring, passes a barrier, copies the start of its own
// ring from its left neighbour, and passes another, with each kind of store
// in turn; under StoresAuto it keeps the kind whose rounds took less time
// in all. The rounds run whatever a rank's Stores, so that ranks configured
// apart still pass the same barriers. The rings carry no message yet, so
// this touches no state but the native barrier's count, which every rank
// advances alike.
func (t *Transport) chooseStores(ctx context.Context) error {
	n, r := t.cfg.Size, t.cfg.Rank
	t.streaming = false
	if n > 1 && stream.Available() {
		right, left := t.peers[(r+1)%n], t.peers[(r+n-1)%n]
		size := min(storesBytes, len(right.out.data))
		src, dst := make([]byte, size), make([]byte, size)
		var took [2]time.Duration // ordinary, streaming
		for round := range 2 + 2*storesRounds {
			streaming := round%2 == 1
			start := time.Now()
			for range storesIters {
				if streaming {
					stream.Copy(right.out.data[:size], src)
				} else {
					copy(right.out.data[:size], src)
				}
				if err := t.barrier(ctx, offArrive); err != nil {
					return fmt.Errorf("timing stores: %w", err)
				}
				copy(dst, left.in.data[:size])
				if err := t.barrier(ctx, offArrive); err != nil {
					return fmt.Errorf("timing stores: %w", err)
				}
			}
			if round >= 2 {
				took[round%2] += time.Since(start)
			}
		}
		t.streaming = t.cfg.Stores == StoresStreaming || t.cfg.Stores == StoresAuto && took[1] < took[0]
	}
	for _, p := range t.peers {
		if p != nil {
			p.out.streaming = t.streaming
		}
	}
	return nil
}

// Streaming reports whether this rank writes what its peers read next with
// streaming stores (see Config.Stores), once connected.
func (t *Transport) Streaming() bool { return t.streaming }

// fill copies src into dst, which peers read next, with the stores
// chooseStores picked.
func (t *Transport) fill(dst, src []byte) {
	if t.streaming {
		stream.Copy(dst, src)
		return
	}
	copy(dst, src)
}
