package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// Shrinking and growing a communicator with NCCL's own calls, which reuse
// the old communicator's bootstrap rather than a new unique id:
// ncclCommShrink (NCCL 2.27 and newer) and ncclCommGrow with
// ncclCommGetUniqueId (2.29 and newer), bound when the library exports
// them. Both make a new communicator and leave the old one to be closed.
// collkit's elastic communicators (collkit.Comm.Shrink, Grow) use them when
// every rank can, and otherwise make the next communicator anew.

// Fail ends the Transport for every later call, which then returns an error
// wrapping transport.ErrClosed and reason, as after an abort; collkit calls
// it when a communicator failed. With Config.KeepForShrink, on a blocking
// communicator of an NCCL with ncclCommShrink, the communicator of all
// ranks is kept for Shrink and Close ends it; otherwise Fail closes the
// Transport. It reports whether it kept the communicator.
func (t *Transport) Fail(reason string) bool {
	t.mu.Lock()
	c := t.main
	t.mu.Unlock()
	if c == nil || !c.keep || t.closed.Load() || c.ended.Load() {
		t.Close()
		return false
	}
	why := errors.New(reason)
	t.failed.Store(true)
	c.retire(why)
	t.mu.Lock()
	var pairs []*comm
	for _, e := range t.pairs {
		select {
		case <-e.ready:
			if e.c != nil {
				pairs = append(pairs, e.c)
			}
		default: // still being created: its context ends with the failed call's
		}
	}
	children := t.children
	t.mu.Unlock()
	for _, p := range pairs {
		p.abort(why) // messages are not shrunk: the next Transport makes its own pairs
	}
	for _, ch := range children {
		ch.Close()
	}
	return true
}

// Failed reports whether Fail kept the communicator: every call fails
// until Close ends it (after Shrink made the next one, or not).
func (t *Transport) Failed() bool { return t.failed.Load() && !t.closed.Load() }

// CanShrink reports whether Shrink can make the next communicator from this
// one: NCCL has ncclCommShrink, the communicator is blocking, was not
// aborted or destroyed (Config.KeepForShrink keeps it after a failure),
// and ncclCommGetAsyncError reports no error. NCCL refuses to shrink a
// communicator with an asynchronous error, such as the remote error of a
// peer that died, whatever the flag (ncclCommShrink checks it with
// ncclCommEnsureReady after NCCL_SHRINK_ABORT ended the unfinished work):
// such a communicator is to be aborted and made anew. abort reports that a
// call on it failed or was left unfinished, so that Shrink must pass abort
// (NCCL_SHRINK_ABORT). Call it with no operation in flight.
func (t *Transport) CanShrink() (ok, abort bool) {
	t.mu.Lock()
	c := t.main
	t.mu.Unlock()
	if c == nil || t.a.ncclCommShrink == nil || !c.blocking || t.closed.Load() {
		return false, false
	}
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	if c.h == 0 || c.ended.Load() {
		return false, c.dirty
	}
	res := new(int32)
	if r := c.a.ncclCommGetAsyncError(c.h, res); r != ncclSuccess || *res != ncclSuccess {
		return false, c.dirty
	}
	return true, c.dirty
}

// Shrink makes a Transport over the ranks of this one not in exclude,
// numbered in their old order, with ncclCommShrink. Every rank not
// excluded calls it at the same point with the same exclude and abort; the
// excluded ranks do not. abort (NCCL_SHRINK_ABORT) makes NCCL first end
// what this communicator left running; pass it when CanShrink says so on
// any rank (NCCL_SHRINK_DEFAULT on a communicator with unfinished work may
// deadlock). The new communicator takes this one's configuration and GPU,
// and keeps its pair communicators' keys in store, which must not hold this
// Transport's (give it a fresh prefix with bootstrap.WithPrefix). This
// Transport stays; close it once the new one is used. When a rank never
// comes, ctx ends the wait by aborting this communicator.
func (t *Transport) Shrink(ctx context.Context, store bootstrap.Store, exclude []int, abort bool) (*Transport, error) {
	const what = "shrink"
	c, err := t.ready(what) // a Transport that failed (Fail) is ready for this
	if err != nil {
		return nil, err
	}
	if t.a.ncclCommShrink == nil {
		return nil, fmt.Errorf("nccl: rank %d: shrink: ncclCommShrink needs NCCL 2.27 or newer, this is %s: %w", t.rank, versionString(t.version), ErrUnsupported)
	}
	if !c.blocking {
		return nil, t.badArg(what, "a non-blocking communicator (Config.NonBlocking): collkit shrinks blocking ones only: %w", ErrUnsupported)
	}
	excl := slices.Compact(slices.Sorted(slices.Values(exclude)))
	list := make([]int32, len(excl)) // NCCL sorts it in place: C writes it
	below := 0
	for i, r := range excl {
		if r < 0 || r >= t.size || r == t.rank {
			return nil, t.badArg(what, "rank %d cannot be excluded by rank %d of %d: %w", r, t.rank, t.size, transport.ErrBadPeer)
		}
		if r < t.rank {
			below++
		}
		list[i] = int32(r)
	}
	if len(list) == 0 {
		return nil, t.badArg(what, "no rank to exclude (ncclCommShrink excludes at least one)")
	}
	sub, nc := t.derived(store, t.rank-below, t.size-len(list))
	flags := int32(ncclShrinkDefault)
	if abort {
		flags = ncclShrinkAbort
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err = c.manage(ctx, "ncclCommShrink", func() int32 {
		return t.a.ncclCommShrink(c.h, &list[0], int32(len(list)), &nc.h, nil, flags)
	})
	if err == nil && abort {
		c.abortMu.Lock()
		c.quiet = true // NCCL ended what c left running: its buffers can go
		c.abortMu.Unlock()
	}
	return t.adopt(what, sub, nc, err)
}

// CanGrow reports whether Grow can run: NCCL has ncclCommGrow and
// ncclCommGetUniqueId, and the communicator is blocking and sound (no
// failed call, no Fail).
func (t *Transport) CanGrow() bool {
	t.mu.Lock()
	c := t.main
	t.mu.Unlock()
	return c != nil && t.a.ncclCommGrow != nil && c.blocking && !t.closed.Load() && !t.failed.Load() && !c.gone.Load()
}

// GrowID is the id of one ncclCommGrow, made by ncclCommGetUniqueId on one
// rank of the old communicator (the coordinator), which passes it to its
// own Grow and to the new ranks' ConnectGrow.
type GrowID [uniqueIDBytes]byte

// GrowID makes the id of the next Grow with ncclCommGetUniqueId. One rank
// calls it, with no operation of this Transport in flight on any rank,
// before every rank calls Grow; an id serves one Grow.
func (t *Transport) GrowID() (GrowID, error) {
	const what = "grow id"
	var id GrowID
	c, err := t.ready(what)
	if err != nil {
		return id, err
	}
	if t.a.ncclCommGetUniqueId == nil {
		return id, fmt.Errorf("nccl: rank %d: grow: ncclCommGetUniqueId needs NCCL 2.29 or newer, this is %s: %w", t.rank, versionString(t.version), ErrUnsupported)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return id, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	u := new(uniqueID)
	if r := t.a.ncclCommGetUniqueId(c.h, u); r != ncclSuccess {
		return id, wrap(t, fmt.Errorf("%s: %w", what, c.ncclErr("ncclCommGetUniqueId", r)))
	}
	return GrowID(u.Internal), nil
}

// Grow makes a Transport of size ranks with ncclCommGrow: this Transport's
// ranks keep their numbers and the new ranks, which call ConnectGrow, take
// the numbers from this one's size up. Every rank of this Transport calls
// it at the same point, with no operation in flight; id is the one GrowID
// gave on the rank that called it, and nil on the others. store is as for
// Shrink. This Transport stays; close it once the new one is used. When a
// rank never comes, ctx ends the wait by aborting this communicator, as
// for Shrink.
func (t *Transport) Grow(ctx context.Context, store bootstrap.Store, size int, id *GrowID) (*Transport, error) {
	const what = "grow"
	c, err := t.ready(what)
	if err != nil {
		return nil, err
	}
	switch {
	case t.a.ncclCommGrow == nil:
		return nil, fmt.Errorf("nccl: rank %d: grow: ncclCommGrow needs NCCL 2.29 or newer, this is %s: %w", t.rank, versionString(t.version), ErrUnsupported)
	case !c.blocking:
		return nil, t.badArg(what, "a non-blocking communicator (Config.NonBlocking): collkit grows blocking ones only: %w", ErrUnsupported)
	case size <= t.size:
		return nil, t.badArg(what, "to %d ranks: a grown communicator has more than this one's %d", size, t.size)
	}
	var u *uniqueID
	if id != nil {
		u = &uniqueID{Internal: *id}
	}
	sub, nc := t.derived(store, t.rank, size)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		nc.destroy(0)
		sub.kill()
		return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	err = c.manage(ctx, "ncclCommGrow", func() int32 {
		return t.a.ncclCommGrow(c.h, int32(size), u, -1, &nc.h, nil)
	})
	return t.adopt(what, sub, nc, err)
}

// ConnectGrow is Connect for a rank that joins a communicator growing with
// ncclCommGrow: this Transport, made by New with Config.Rank at least the
// old communicator's size and Config.Size the new size, creates its
// communicator from id, which the coordinator's GrowID made, while the
// ranks of the old communicator call Grow. Config.NonBlocking is not
// supported.
func (t *Transport) ConnectGrow(ctx context.Context, store bootstrap.Store, id GrowID) error {
	if t.a.ncclCommGrow == nil {
		return fmt.Errorf("nccl: rank %d: grow: ncclCommGrow needs NCCL 2.29 or newer, this is %s: %w", t.rank, versionString(t.version), ErrUnsupported)
	}
	if t.cfg.NonBlocking {
		return t.badArg("grow", "a non-blocking communicator (Config.NonBlocking): collkit grows blocking ones only: %w", ErrUnsupported)
	}
	return t.connect(ctx, store, func() (*comm, error) {
		c := newComm(t, t.rank)
		fail := func(err error) (*comm, error) {
			c.destroy(0)
			return nil, fmt.Errorf("nccl: rank %d: joining the grown communicator (%d ranks) on GPU %d: %w", t.rank, t.size, t.dev, err)
		}
		if err := c.createStream(); err != nil {
			return fail(err)
		}
		u := &uniqueID{Internal: id}
		if err := t.createBlocking(ctx, c, "ncclCommGrow", func(h *uintptr) int32 {
			return t.a.ncclCommGrow(0, int32(t.size), u, int32(t.rank), h, configure(true))
		}); err != nil {
			return fail(err)
		}
		if err := c.check(t.size, t.rank); err != nil {
			c.abort(err)
			return fail(err)
		}
		return c, nil
	})
}

// derived makes the Transport, not yet connected, that Shrink or Grow
// fills: rank of size on this one's GPU, with its configuration.
func (t *Transport) derived(store bootstrap.Store, rank, size int) (*Transport, *comm) {
	cfg := t.cfg
	cfg.Rank, cfg.Size = rank, size
	life, kill := context.WithCancel(context.Background())
	sub := &Transport{cfg: cfg, a: t.a, version: t.version, dev: t.dev, cuCtx: t.cuCtx, prefix: t.prefix,
		store: store, rank: rank, size: size, life: life, kill: kill, started: true, pairs: make(map[[2]int]*pairEntry)}
	nc := newComm(sub, rank)
	return sub, nc
}

// adopt makes nc, which call (err) filled, sub's communicator of all ranks.
func (t *Transport) adopt(what string, sub *Transport, nc *comm, err error) (*Transport, error) {
	fail := func(err error) (*Transport, error) {
		nc.abort(err)
		nc.destroy(0)
		sub.kill()
		return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	if err != nil {
		return fail(err)
	}
	if nc.h == 0 {
		return fail(errors.New("NCCL finished without a communicator"))
	}
	if err := nc.check(sub.size, sub.rank); err != nil {
		return fail(err)
	}
	if err := nc.createStream(); err != nil {
		return fail(err)
	}
	nc.keep = sub.keeps(nc)
	sub.main = nc
	return sub, nil
}

// check verifies that NCCL made c as rank of size.
func (c *comm) check(size, rank int) error {
	var n, r int32
	if code := c.a.ncclCommCount(c.h, &n); code != ncclSuccess {
		return c.ncclErr("ncclCommCount", code)
	}
	if code := c.a.ncclCommUserRank(c.h, &r); code != ncclSuccess {
		return c.ncclErr("ncclCommUserRank", code)
	}
	if int(n) != size || int(r) != rank {
		return fmt.Errorf("NCCL made rank %d of %d, want rank %d of %d", r, n, rank, size)
	}
	return nil
}

// manage runs call, a blocking NCCL call that makes a communicator from c
// (ncclCommShrink, ncclCommGrow), on the device's thread. NCCL blocks in it
// until the other ranks come: when ctx or the transport's life ends first,
// the watchdog aborts c, which ends the new communicator's creation too
// (NCCL's child abort flag), and manage returns why. Unlike enqueue it runs
// on a communicator that failed but was kept. The caller holds mu.
func (c *comm) manage(ctx context.Context, name string, call func() int32) error {
	if c.ended.Load() {
		return fmt.Errorf("%s: %w", name, c.usable())
	}
	var r int32
	err := c.onDevice(func() error {
		c.inLaunch.Store(true)
		defer c.inLaunch.Store(false)
		if c.life.Err() != nil {
			c.abort(transport.ErrClosed)
			return nil
		}
		stop := context.AfterFunc(ctx, func() {
			if c.inLaunch.Load() {
				c.abort(stuck(ctx, name, ctx.Err(), thenAborted))
			}
		})
		defer stop()
		r = call()
		return nil
	})
	switch {
	case err != nil:
		return err
	case c.ended.Load():
		return fmt.Errorf("%s: %w", name, c.usable())
	case r != ncclSuccess:
		err := c.ncclErr(name, r)
		c.fault(err)
		return err
	}
	return nil
}
