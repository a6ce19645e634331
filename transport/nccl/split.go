package nccl

import (
	"context"
	"fmt"
)

// Split makes a sub-communicator with ncclCommSplit: the ranks that pass
// the same color form one, ordered by key (then by rank). A negative color
// leaves this rank out; Split then returns nil and no error. Every rank of
// the communicator calls Split, in the same order relative to its other
// collectives. The sub-communicator shares the GPU, the bootstrap store and
// the blocking mode; closing this Transport closes it too.
//
// A non-blocking NCCL may return the new communicator late: ncclCommSplit
// returns ncclInProgress with it still NULL, and writes it once the parent's
// ncclCommGetAsyncError stops reporting ncclInProgress. Split polls until
// then.
func (t *Transport) Split(ctx context.Context, color, key int) (*Transport, error) {
	const what = "split"
	c, err := t.ready(what)
	if err != nil {
		return nil, err
	}
	if t.a.ncclCommSplit == nil {
		return nil, fmt.Errorf("nccl: rank %d: split: ncclCommSplit needs NCCL 2.18 or newer, this is %s: %w", t.rank, versionString(t.version), ErrUnsupported)
	}
	t.mu.Lock()
	seq := t.splits
	t.splits++
	t.mu.Unlock()
	cfg := t.cfg
	cfg.Name = fmt.Sprintf("%s/split%d/color%d", t.cfg.Name, seq, color)
	life, kill := context.WithCancel(t.life)
	sub := &Transport{cfg: cfg, a: t.a, version: t.version, dev: t.dev, cuCtx: t.cuCtx, prefix: "nccl/" + cfg.Name,
		store: t.store, life: life, kill: kill, started: true, pairs: make(map[[2]int]*pairEntry)}
	nc := newComm(sub, 0)
	ncolor := int32(color)
	if color < 0 {
		ncolor = ncclSplitNoColor
	}
	fail := func(err error) (*Transport, error) {
		nc.destroy(t.cfg.CloseTimeout)
		kill()
		return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return fail(err)
	}
	// The child is written into nc.h, which stays put: nc is on the heap,
	// and NCCL may write it after ncclCommSplit returned.
	if err := c.enqueue(ctx, nil, func() (string, int32) {
		return "ncclCommSplit", t.a.ncclCommSplit(c.h, ncolor, int32(key), &nc.h, configure(c.blocking))
	}); err != nil {
		return fail(err)
	}
	if color < 0 {
		if nc.h != 0 {
			nc.destroy(t.cfg.CloseTimeout)
		}
		kill()
		return nil, nil
	}
	if nc.h == 0 {
		return fail(fmt.Errorf("ncclCommSplit finished without a communicator for color %d", color))
	}
	// A child still being set up reports ncclInProgress itself.
	if err := nc.poll(ctx, "ncclCommSplit", false); err != nil {
		return fail(err)
	}
	var n, rank int32
	if r := t.a.ncclCommCount(nc.h, &n); r != ncclSuccess {
		err := nc.ncclErr("ncclCommCount", r)
		nc.abort(err)
		return fail(err)
	}
	if r := t.a.ncclCommUserRank(nc.h, &rank); r != ncclSuccess {
		err := nc.ncclErr("ncclCommUserRank", r)
		nc.abort(err)
		return fail(err)
	}
	nc.rank = int(rank)
	if err := nc.createStream(); err != nil {
		return fail(err)
	}
	sub.cfg.Rank, sub.cfg.Size = int(rank), int(n)
	sub.rank, sub.size, sub.main = int(rank), int(n), nc
	t.mu.Lock()
	t.children = append(t.children, sub)
	t.mu.Unlock()
	return sub, nil
}
