package mem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/collkit/collkit/bootstrap"
)

// Networks that ranks join through a store (Connect), by id. A network
// leaves the table when the last of its ranks has connected.
var (
	joinMu   sync.Mutex
	joinable = map[string]*Network{}
)

// Connect joins rank of a network of size ranks through store, as the tcp
// transport connects through it: rank 0 makes the network (with cfg) and
// publishes its id, every rank takes its end and says so, and Connect
// returns once all size ranks have taken theirs, or fails when ctx ends
// first, naming the ranks that never came. The ranks must run in this
// process (as goroutines); a rank of another process gets an error saying
// so.
func Connect(ctx context.Context, store bootstrap.Store, rank, size int, cfg Config) (*Transport, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("mem: rank %d of %d is not a valid place in a network", rank, size)
	}
	var id string
	if rank == 0 {
		b := make([]byte, 8)
		rand.Read(b)
		id = hex.EncodeToString(b)
		joinMu.Lock()
		joinable[id] = NewNetwork(size, cfg)
		joinMu.Unlock()
		if err := store.Set(ctx, "mem/network", []byte(id)); err != nil {
			forget(id)
			return nil, fmt.Errorf("mem: rank 0: publishing the network: %w", err)
		}
	} else {
		b, err := store.Get(ctx, "mem/network")
		if err != nil {
			return nil, fmt.Errorf("mem: rank %d: waiting for rank 0's network: %w", rank, err)
		}
		id = string(b)
	}
	joinMu.Lock()
	n := joinable[id]
	joinMu.Unlock()
	if n == nil {
		return nil, fmt.Errorf("mem: rank %d: network %s is not in this process: the mem transport connects only ranks that run in one process", rank, id)
	}
	if len(n.ts) != size {
		return nil, fmt.Errorf("mem: rank %d: rank 0 made a network of %d ranks, this rank was told %d", rank, len(n.ts), size)
	}
	t := n.ts[rank]
	err := bootstrap.Barrier(ctx, store, "mem/joined", rank, size)
	if rank == 0 {
		forget(id)
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("mem: rank %d: waiting for the other ranks to join network %s: %w", rank, id, err)
	}
	return t, nil
}

func forget(id string) {
	joinMu.Lock()
	delete(joinable, id)
	joinMu.Unlock()
}
