//go:build linux

package shm

import (
	"context"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/collkit/collkit/internal/spin"
	"github.com/collkit/collkit/transport"
)

// Futex operations. The words live in MAP_SHARED memory of several
// processes, so these are the shared (not _PRIVATE) forms.
const (
	futexWait = 0
	futexWake = 1
)

// sleepSlice bounds one futex sleep, so that a sleeping rank looks at its
// context, its transport and its peer's liveness this often even if nobody
// wakes it.
const sleepSlice = 100 * time.Millisecond

// futexSleep sleeps while *w == val, for at most d.
func futexSleep(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wokenAt is where the waker of futex word w leaves the time it woke the
// sleeper (Unix ns, 0 for none), so that the sleeper learns what its sleep
// cost (spin.Budget.ObserveWake): the 8 bytes after w, on the cache line
// that w has to itself (segment.go).
func wokenAt(w *atomic.Uint32) *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Add(unsafe.Pointer(w), 8))
}

// wake clears a waiter's flag and wakes it if it had set one.
func wake(w *atomic.Uint32) {
	if w.Load() != 0 {
		wokenAt(w).Store(time.Now().UnixNano())
		w.Store(0)
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, 1<<30, 0, 0, 0)
	}
}

// forceWake wakes a waiter on w unconditionally (Close, cancellation).
func forceWake(w *atomic.Uint32) {
	w.Store(0)
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, 1<<30, 0, 0, 0)
}

// await waits until ready reports true: it polls cfg.Spin times, then polls
// with sched_yield for as long as b allows (see Config.Yield), then sleeps on
// k's futex word, which the other side clears and wakes (see wake) after
// every change that can make ready true. failed reports why waiting is
// pointless (this transport or a peer closed, a peer died); it is called
// after a last look at ready, so data a peer sent before it closed is still
// taken. How long the wait took, and what a sleep cost, teach b. A wait
// that goes to sleep publishes n for the peers' stall reports (ping.go).
func (t *Transport) await(ctx context.Context, k *waker, b *spin.Budget, n *note, ready func() bool, failed func(live bool) error) (err error) {
	w := k.w
	for range t.cfg.Spin {
		if ready() {
			return nil
		}
	}
	start := time.Now()
	woke := time.Duration(-1) // what the last sleep cost, when a waker ended it
	defer func() { b.ObserveSlept(time.Since(start), woke) }()
	if yield := b.Next(); yield > 0 {
		for i := 0; ; i++ {
			if ready() {
				return nil
			}
			if err := t.stopErr(ctx, failed, false); err != nil {
				if ready() {
					return nil
				}
				return err
			}
			if i&7 == 7 && time.Since(start) > yield {
				break
			}
			// sched_yield lets other processes have this core: with
			// more ranks than cores, the rank this one waits for may be
			// runnable on it (np 4 on 2 cores, 8 bytes: 2.9 us a call,
			// against 3.5-3.9 us yielding every fourth poll). Gosched
			// lets the goroutines of this process run (other ranks, in
			// tests and in-process jobs).
			spin.Yield()
			if i&3 == 3 {
				runtime.Gosched()
			}
		}
	}
	if ctx.Done() != nil {
		k.arm(ctx)
		defer k.done()
	}
	rec := t.publish(n)
	if rec >= 0 {
		defer func() { t.unpublish(rec, err != nil) }()
	}
	lastLive := time.Now()
	at := wokenAt(w)
	for {
		if rec >= 0 {
			t.beat(rec, n)
		}
		at.Store(0)
		w.Store(1)
		if ready() {
			w.Store(0)
			return nil
		}
		live := false
		if time.Since(lastLive) >= t.cfg.LivenessInterval {
			live, lastLive = true, time.Now()
		}
		if err := t.stopErr(ctx, failed, live); err != nil {
			w.Store(0)
			if ready() {
				return nil
			}
			return err
		}
		futexSleep(w, 1, min(sleepSlice, t.cfg.LivenessInterval))
		if ns := at.Load(); ns != 0 {
			woke = max(time.Duration(time.Now().UnixNano()-ns), -1)
		}
	}
}

// stopErr is the reason to stop waiting, or nil.
func (t *Transport) stopErr(ctx context.Context, failed func(live bool) error, live bool) error {
	if t.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := failed(live); err != nil {
		return err
	}
	return t.aborted()
}

// aborted is the abort notice of any peer that gave up (Abort), whichever
// peer this rank waits on: a communicator that failed on one rank is over
// on all of them, and the ranks that wait on others learn it here rather
// than at their timeout.
func (t *Transport) aborted() error {
	for _, pr := range t.peers {
		if pr != nil && pr.seg.closed() {
			if reason, ok := pr.seg.abortReason(); ok {
				return &transport.AbortError{Rank: pr.rank, Reason: reason}
			}
		}
	}
	return nil
}

// waker wakes the waiter on one futex word when the context of its wait
// ends. One side waits on a word at a time, so one waker serves each word.
// It stays registered with the context of the last wait when that context
// can be compared, so that the next wait under the same context (a
// communicator passes one to every message of a collective, and to one
// collective after another) registers nothing: context.AfterFunc costs two
// allocations and its context's lock. A wake-up that comes late, for a
// wait under another context, is harmless: await looks again.
type waker struct {
	w    *atomic.Uint32
	wake func() // made once
	ctx  context.Context
	stop func() bool
}

// newWaker returns the waker of word w of t's mappings. Its wake-up may
// come after the wait, even after Close: it looks at the mappings only
// under t.mu, while t is open.
func (t *Transport) newWaker(w *atomic.Uint32) *waker {
	return &waker{w: w, wake: func() {
		t.mu.RLock()
		if !t.closed.Load() {
			forceWake(w)
		}
		t.mu.RUnlock()
	}}
}

// arm makes the end of ctx wake the waiter.
func (k *waker) arm(ctx context.Context) {
	if k.ctx != nil && k.ctx == ctx {
		return
	}
	if k.stop != nil {
		k.stop()
	}
	k.ctx, k.stop = nil, context.AfterFunc(ctx, k.wake)
	if reflect.TypeOf(ctx).Comparable() {
		k.ctx = ctx
	}
}

// done ends a wait: it keeps the registration for the next wait, unless
// its context cannot be told from another.
func (k *waker) done() {
	if k.ctx == nil && k.stop != nil {
		k.stop()
		k.stop = nil
	}
}
