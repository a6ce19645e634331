package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/collkit/collkit/transport"
)

// comm is one NCCL communicator with its CUDA stream and the device and
// pinned host buffers its host-memory operations stage data through. Its
// operations run one at a time (mu), as NCCL requires of a communicator.
type comm struct {
	a        *api
	version  int
	dev      int32
	cuCtx    uintptr // the device's primary context
	rank     int     // this rank in the communicator, for errors
	blocking bool    // created in NCCL's (default) blocking mode
	keep     bool    // a failed call leaves h for Shrink rather than abort it
	life     context.Context

	mu       sync.Mutex
	h        uintptr // ncclComm_t; fixed once created
	stream   uintptr
	sendD    devBuf
	recvD    devBuf
	hostS    hostBuf
	hostR    hostBuf
	attrs    *pointerAttrs
	async    int32 // ncclCommGetAsyncError's result, in heap memory NCCL writes
	released bool  // destroyed, buffers freed

	// Abort state, which the watchdog changes from another goroutine
	// while an operation holds mu.
	inLaunch atomic.Bool // an NCCL call that may block is running
	gone     atomic.Bool // no more operations: h failed, or was aborted or destroyed
	ended    atomic.Bool // h was aborted or destroyed: no more NCCL calls on it
	abortMu  sync.Mutex
	why      error // why h is gone; set before gone
	dirty    bool  // kept after a call on h failed or was left unfinished
	leak     bool  // aborted: freeing could wait on a stuck kernel
	quiet    bool  // NCCL_SHRINK_ABORT ended h's kernels: an abort may free
	stopLife func() bool
}

type devBuf struct {
	p uintptr
	n int
}

type hostBuf struct {
	p unsafe.Pointer
	n int
}

func (b hostBuf) bytes(n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.p), n)
}

func newComm(t *Transport, rank int) *comm {
	c := &comm{a: t.a, version: t.version, dev: t.dev, cuCtx: t.cuCtx, rank: rank, life: t.life,
		blocking: !t.cfg.NonBlocking || t.a.ncclCommInitRankCfg == nil, attrs: new(pointerAttrs)}
	// A blocking NCCL call stuck when the Transport closes (a peer gone
	// while NCCL connects) is ended by aborting the communicator.
	c.stopLife = context.AfterFunc(t.life, func() {
		if c.inLaunch.Load() {
			c.abort(transport.ErrClosed)
		}
	})
	return c
}

// createStream makes the communicator's stream, which does not wait for
// the legacy default stream.
func (c *comm) createStream() error {
	return c.onDevice(func() error {
		if r := c.a.cuStreamCreate(&c.stream, cuStreamNonBlocking); r != cuSuccess {
			return c.cudaErr("cuStreamCreate", r)
		}
		return nil
	})
}

// onDevice runs f on one OS thread with this communicator's device
// current: a CUDA context belongs to the thread, and goroutines move
// between threads.
func (c *comm) onDevice(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := c.a.cuCtxSetCurrent(c.cuCtx); r != cuSuccess {
		return c.cudaErr("cuCtxSetCurrent", r)
	}
	return f()
}

func (c *comm) cudaErr(call string, code int32) error {
	return &CallError{Rank: c.rank, Call: call, Code: code, Msg: c.a.cudaErrorString(code)}
}

func (c *comm) ncclErr(call string, code int32) error {
	msg := c.a.ncclGetErrorString(code)
	if c.a.ncclGetLastError != nil && !c.ended.Load() {
		if last := c.a.ncclGetLastError(c.h); last != "" {
			msg += ": " + last
		}
	}
	return &CallError{Rank: c.rank, Call: call, Code: code, Msg: msg}
}

// usable returns the reason c cannot run operations, if any.
func (c *comm) usable() error {
	if c.gone.Load() {
		if c.why != nil && c.why != transport.ErrClosed {
			return fmt.Errorf("%w: %w", transport.ErrClosed, c.why)
		}
		return transport.ErrClosed
	}
	if c.h == 0 {
		return transport.ErrClosed
	}
	return nil
}

// abort tears the communicator down at once (ncclCommAbort), which also
// stops its kernels and unblocks an NCCL call stuck in another goroutine,
// and makes why the error of every later operation (unless it failed
// already). It is safe from any goroutine and acts once.
func (c *comm) abort(why error) {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	if c.h == 0 || c.ended.Load() {
		return
	}
	c.retireLocked(why)
	c.ended.Store(true)
	c.a.ncclCommAbort(c.h)
	c.leak = !c.quiet
}

// fault is abort for an NCCL call on c that failed or was left unfinished
// (a peer gone, the context ended while the stream ran). A communicator
// kept for Shrink (Config.KeepForShrink) is not aborted: every later
// operation fails with why, and Shrink, which ends what it left running
// (NCCL_SHRINK_ABORT), or Close, which aborts it, follows. An NCCL call
// blocked inside the library is still aborted by the watchdog (abort).
func (c *comm) fault(why error) {
	if !c.keep {
		c.abort(why)
		return
	}
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	if c.h == 0 || c.ended.Load() {
		return
	}
	c.retireLocked(why)
	c.dirty = true
}

// retire makes why the error of every later operation, leaving h as it is
// (Transport.Fail): no NCCL call failed on it.
func (c *comm) retire(why error) {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	c.retireLocked(why)
}

func (c *comm) retireLocked(why error) {
	if !c.gone.Load() {
		c.why = why
		c.gone.Store(true)
	}
}

// spinner paces a polling loop: it spins for the first rounds, where a
// small collective ends, yields the processor for the next milliseconds,
// then sleeps a few microseconds at a time. It never sleeps a millisecond.
type spinner struct {
	n     int
	start time.Time
	d     time.Duration
}

const (
	spinRounds = 64
	yieldFor   = 2 * time.Millisecond
	maxSleep   = 50 * time.Microsecond
)

func (s *spinner) wait() {
	if s.n++; s.n < spinRounds {
		return
	}
	if s.start.IsZero() {
		s.start = time.Now()
	}
	if time.Since(s.start) < yieldFor {
		runtime.Gosched()
		return
	}
	s.d = min(max(2*s.d, time.Microsecond), maxSleep)
	time.Sleep(s.d)
}

// poll waits until NCCL has no operation of c in progress and, when stream
// is true, until the work queued on c's stream has finished. It checks
// ncclCommGetAsyncError on every round, so a failure on another rank or in
// the network surfaces here, and it aborts the communicator when ctx or the
// transport's life ends: a stuck collective returns an error, never hangs.
func (c *comm) poll(ctx context.Context, what string, stream bool) error {
	if stream {
		// cuStreamQuery wants the stream's context current on the thread.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if r := c.a.cuCtxSetCurrent(c.cuCtx); r != cuSuccess {
			err := fmt.Errorf("%s: %w", what, c.cudaErr("cuCtxSetCurrent", r))
			c.fault(err)
			return err
		}
	}
	var s spinner
	for {
		if c.gone.Load() {
			return fmt.Errorf("%s: %w", what, c.usable())
		}
		if r := c.a.ncclCommGetAsyncError(c.h, &c.async); r != ncclSuccess {
			err := c.ncclErr("ncclCommGetAsyncError", r)
			c.fault(err)
			return err
		}
		switch async := c.async; async {
		case ncclSuccess:
			if !stream {
				return nil
			}
			switch q := c.a.cuStreamQuery(c.stream); q {
			case cuSuccess:
				return nil
			case cuErrorNotReady:
			default:
				err := fmt.Errorf("%s: %w", what, c.cudaErr("cuStreamQuery", q))
				c.fault(err)
				return err
			}
		case ncclInProgress:
		default:
			err := fmt.Errorf("%s: %w", what, c.ncclErr("ncclCommGetAsyncError", async))
			c.fault(err)
			return err
		}
		if err := c.life.Err(); err != nil {
			c.abort(transport.ErrClosed)
			return fmt.Errorf("%s: %w", what, transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			then := thenAborted
			if c.keep {
				then = thenKept
			}
			why := stuck(ctx, what, err, then)
			c.fault(why)
			return why
		}
		s.wait()
	}
}

// thenAborted and thenKept end the error of an operation ctx ended: what
// became of the communicator.
const (
	thenAborted = "the communicator was aborted (ncclCommAbort)"
	thenKept    = "the communicator was kept for Shrink (Close aborts it)"
)

// stuck is the error of an operation ctx ended; then says what became of
// the communicator.
func stuck(ctx context.Context, what string, err error, then string) error {
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%s did not finish: %w (%v); %s", what, err, cause, then)
	}
	return fmt.Errorf("%s did not finish: %w; %s", what, err, then)
}

// settle handles the result of an NCCL call: success, an error, or (on a
// non-blocking communicator) ncclInProgress, which it polls to the end.
func (c *comm) settle(ctx context.Context, call string, r int32) error {
	switch {
	case r == ncclSuccess && !c.gone.Load():
		return nil
	case r == ncclInProgress && !c.gone.Load():
		return c.poll(ctx, call, false)
	case c.gone.Load():
		// The watchdog aborted the call: its reason is the error.
		return fmt.Errorf("%s: %w", call, c.usable())
	}
	err := c.ncclErr(call, r)
	c.fault(err)
	return err
}

// enqueue runs prep (staging, checks) and then launch, which queues NCCL
// work on c.stream, on the device's thread, and settles launch's result.
// On a blocking communicator NCCL may block inside launch (connecting to
// peers on first use); a watchdog then aborts the communicator when ctx or
// the transport's life ends, which makes NCCL return. The caller holds mu.
func (c *comm) enqueue(ctx context.Context, prep func() error, launch func() (string, int32)) error {
	var call string
	var r int32
	err := c.onDevice(func() error {
		if prep != nil {
			if err := prep(); err != nil {
				return err
			}
		}
		if !c.blocking {
			call, r = launch()
			return nil
		}
		c.inLaunch.Store(true)
		defer c.inLaunch.Store(false)
		if c.life.Err() != nil {
			c.abort(transport.ErrClosed)
			return transport.ErrClosed
		}
		if ctx.Done() != nil {
			stop := context.AfterFunc(ctx, func() {
				if c.inLaunch.Load() {
					c.abort(stuck(ctx, "the NCCL call", ctx.Err(), thenAborted))
				}
			})
			defer stop()
		}
		call, r = launch()
		return nil
	})
	if err != nil {
		var bad *badBufferError
		if !errors.As(err, &bad) {
			c.fault(err)
		}
		return err
	}
	return c.settle(ctx, call, r)
}

// reserve grows the staging buffers to hold send and recv bytes.
func (c *comm) reserve(send, recv int) error {
	growD := func(b *devBuf, n int) error {
		if b.n >= n {
			return nil
		}
		if b.p != 0 {
			c.a.cuMemFree(b.p)
			*b = devBuf{}
		}
		n = max(n, 4096)
		var p uintptr
		if r := c.a.cuMemAlloc(&p, uintptr(n)); r != cuSuccess {
			return fmt.Errorf("allocating %d bytes on GPU %d: %w", n, c.dev, c.cudaErr("cuMemAlloc", r))
		}
		*b = devBuf{p, n}
		return nil
	}
	growH := func(b *hostBuf, n int) error {
		if b.n >= n {
			return nil
		}
		if b.p != nil {
			c.a.cuMemFreeHost(b.p)
			*b = hostBuf{}
		}
		n = max(n, 4096)
		var p unsafe.Pointer
		if r := c.a.cuMemHostAlloc(&p, uintptr(n), cuMemHostAllocPortable); r != cuSuccess {
			return fmt.Errorf("allocating %d bytes of pinned host memory: %w", n, c.cudaErr("cuMemHostAlloc", r))
		}
		*b = hostBuf{p, n}
		return nil
	}
	return errors.Join(growD(&c.sendD, send), growD(&c.recvD, recv), growH(&c.hostS, send), growH(&c.hostR, recv))
}

// upload copies p to the device send buffer at off, on the stream.
func (c *comm) upload(p []byte, off int) error {
	if len(p) == 0 {
		return nil
	}
	copy(c.hostS.bytes(off + len(p))[off:], p)
	if r := c.a.cuMemcpyHtoDAsync(c.sendD.p+uintptr(off), unsafe.Add(c.hostS.p, off), uintptr(len(p)), c.stream); r != cuSuccess {
		return c.cudaErr("cuMemcpyHtoDAsync", r)
	}
	return nil
}

// download queues the copy of n bytes of the device receive buffer at off
// to pinned memory; fetch reads them once the stream has finished.
func (c *comm) download(off, n int) error {
	if n == 0 {
		return nil
	}
	if r := c.a.cuMemcpyDtoHAsync(unsafe.Add(c.hostR.p, off), c.recvD.p+uintptr(off), uintptr(n), c.stream); r != cuSuccess {
		return c.cudaErr("cuMemcpyDtoHAsync", r)
	}
	return nil
}

func (c *comm) fetch(dst []byte, off int) {
	copy(dst, c.hostR.bytes(off + len(dst))[off:])
}

// run stages send to the device, launches an NCCL operation that reads the
// device send buffer and writes recvLen bytes of the device receive buffer,
// copies them back into out (when out is not nil) and waits for all of it
// within ctx.
func (c *comm) run(ctx context.Context, what string, send []byte, recvLen int, out []byte,
	launch func(sendD, recvD uintptr) (string, int32)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	prep := func() error {
		if err := c.reserve(len(send), recvLen); err != nil {
			return err
		}
		return c.upload(send, 0)
	}
	if err := c.enqueue(ctx, prep, func() (string, int32) { return launch(c.sendD.p, c.recvD.p) }); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return c.finish(ctx, what, out)
}

// finish queues the copy of len(out) bytes of the device receive buffer
// back, waits for the stream and fills out.
func (c *comm) finish(ctx context.Context, what string, out []byte) error {
	if len(out) > 0 {
		if err := c.onDevice(func() error { return c.download(0, len(out)) }); err != nil {
			c.fault(err)
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := c.poll(ctx, what, true); err != nil {
		return err
	}
	if len(out) > 0 {
		c.fetch(out, 0)
	}
	return nil
}

// runDevice launches an NCCL operation on device memory, after checking
// its buffers, and waits for it within ctx. Nothing is copied.
func (c *comm) runDevice(ctx context.Context, what string, bufs []namedBuffer, launch func() (string, int32)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	prep := func() error {
		for _, b := range bufs {
			if err := c.checkBuffer(b); err != nil {
				return err
			}
		}
		return nil
	}
	if err := c.enqueue(ctx, prep, launch); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return c.poll(ctx, what, true)
}

// destroy ends the communicator in order (ncclCommFinalize, bounded by
// timeout, then ncclCommDestroy) and frees its buffers; if finalizing fails
// or takes too long it aborts instead. One kept after a failed call
// (fault) is aborted, which ends what the call left running.
func (c *comm) destroy(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopLife != nil {
		c.stopLife()
	}
	var err error
	if c.h != 0 && !c.ended.Load() {
		if c.a.ncclCommFinalize != nil && !c.blocking && !c.gone.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			r := c.a.ncclCommFinalize(c.h)
			// poll checks life, which may have ended already: finalize
			// regardless and let the timeout bound it.
			life := c.life
			c.life = context.Background()
			err = c.settle(ctx, "ncclCommFinalize", r)
			c.life = life
			cancel()
		}
		c.abortMu.Lock()
		switch {
		case c.ended.Load():
		case c.dirty:
			c.a.ncclCommAbort(c.h)
			c.leak = !c.quiet
		default:
			if r := c.a.ncclCommDestroy(c.h); r != ncclSuccess {
				err = errors.Join(err, c.ncclErr("ncclCommDestroy", r))
			}
		}
		c.retireLocked(transport.ErrClosed)
		c.ended.Store(true)
		c.abortMu.Unlock()
	}
	c.abortMu.Lock()
	leak := c.leak
	c.abortMu.Unlock()
	if leak || c.released {
		// After an abort a kernel may still be stuck; cuMemFree would wait
		// for the whole device. The memory goes with the process.
		return err
	}
	c.released = true
	c.onDevice(func() error {
		if c.sendD.p != 0 {
			c.a.cuMemFree(c.sendD.p)
		}
		if c.recvD.p != 0 {
			c.a.cuMemFree(c.recvD.p)
		}
		if c.hostS.p != nil {
			c.a.cuMemFreeHost(c.hostS.p)
		}
		if c.hostR.p != nil {
			c.a.cuMemFreeHost(c.hostR.p)
		}
		if c.stream != 0 {
			c.a.cuStreamDestroy(c.stream)
		}
		return nil
	})
	c.sendD, c.recvD, c.hostS, c.hostR, c.stream = devBuf{}, devBuf{}, hostBuf{}, hostBuf{}, 0
	return err
}
