package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/collkit/collkit/transport"
)

// comm is one NCCL communicator with its CUDA stream and the device and
// pinned host buffers its operations stage data through. Its operations run
// one at a time (mu), as NCCL requires of a communicator.
type comm struct {
	a        *api
	version  int
	dev      int32
	rank     int  // this rank in the communicator, for errors
	blocking bool // created without the non-blocking config
	life     context.Context

	mu     sync.Mutex
	h      uintptr // ncclComm_t; 0 once destroyed or aborted
	stream uintptr
	dead   error // why h is gone
	sendD  devBuf
	recvD  devBuf
	hostS  hostBuf
	hostR  hostBuf
	leak   bool // aborted: freeing could wait on a stuck kernel
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

// onDevice runs f on one OS thread with this communicator's device
// current: CUDA's current device belongs to the thread, and goroutines move
// between threads.
func (c *comm) onDevice(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := c.a.cudaSetDevice(c.dev); r != cudaSuccess {
		return c.cudaErr("cudaSetDevice", r)
	}
	return f()
}

func (c *comm) cudaErr(call string, code int32) error {
	return &CallError{Rank: c.rank, Call: call, Code: code, Msg: c.a.cudaGetErrorString(code)}
}

func (c *comm) ncclErr(call string, code int32) error {
	msg := c.a.ncclGetErrorString(code)
	if c.a.ncclGetLastError != nil {
		if last := c.a.ncclGetLastError(c.h); last != "" {
			msg += ": " + last
		}
	}
	return &CallError{Rank: c.rank, Call: call, Code: code, Msg: msg}
}

// usable returns the reason c cannot run operations, if any.
func (c *comm) usable() error {
	if c.h == 0 {
		if c.dead != nil {
			return fmt.Errorf("%w: %w", transport.ErrClosed, c.dead)
		}
		return transport.ErrClosed
	}
	return nil
}

// abort tears the communicator down at once (ncclCommAbort), which also
// stops its kernels, and makes why the error of every later operation.
func (c *comm) abort(why error) {
	if c.h == 0 {
		return
	}
	c.a.ncclCommAbort(c.h)
	c.h, c.dead, c.leak = 0, why, true
}

// backoff paces a polling loop: it yields for the first tens of
// microseconds, for latency, then sleeps, doubling up to a millisecond.
type backoff struct {
	start time.Time
	d     time.Duration
}

const (
	spinFor  = 50 * time.Microsecond
	maxSleep = time.Millisecond
)

func (b *backoff) wait() {
	if b.start.IsZero() {
		b.start = time.Now()
	}
	if time.Since(b.start) < spinFor {
		runtime.Gosched()
		return
	}
	b.d = min(max(2*b.d, 5*time.Microsecond), maxSleep)
	time.Sleep(b.d)
}

// poll waits until NCCL has no operation of c in progress and, when stream
// is true, until the work queued on c's stream has finished. It checks
// ncclCommGetAsyncError on every round, so a failure on another rank or in
// the network surfaces here, and it aborts the communicator when ctx or the
// transport's life ends: a stuck collective returns an error, never hangs.
func (c *comm) poll(ctx context.Context, what string, stream bool) error {
	var b backoff
	for {
		var async int32
		if r := c.a.ncclCommGetAsyncError(c.h, &async); r != ncclSuccess {
			err := c.ncclErr("ncclCommGetAsyncError", r)
			c.abort(err)
			return err
		}
		switch async {
		case ncclSuccess:
			if !stream {
				return nil
			}
			switch q := c.a.cudaStreamQuery(c.stream); q {
			case cudaSuccess:
				return nil
			case cudaErrorNotReady:
			default:
				err := fmt.Errorf("%s: %w", what, c.cudaErr("cudaStreamQuery", q))
				c.abort(err)
				return err
			}
		case ncclInProgress:
		default:
			err := fmt.Errorf("%s: %w", what, c.ncclErr("ncclCommGetAsyncError", async))
			c.abort(err)
			return err
		}
		if err := c.life.Err(); err != nil {
			c.abort(transport.ErrClosed)
			return fmt.Errorf("%s: %w", what, transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			why := fmt.Errorf("%s did not finish: %w; the communicator was aborted (ncclCommAbort)", what, err)
			if cause := context.Cause(ctx); cause != nil && cause != err {
				why = fmt.Errorf("%s did not finish: %w (%v); the communicator was aborted (ncclCommAbort)", what, err, cause)
			}
			c.abort(why)
			return why
		}
		b.wait()
	}
}

// settle handles the result of an NCCL call: success, an error, or (on a
// non-blocking communicator) ncclInProgress, which it polls to the end.
func (c *comm) settle(ctx context.Context, call string, r int32) error {
	switch r {
	case ncclSuccess:
		return nil
	case ncclInProgress:
		return c.poll(ctx, call, false)
	}
	err := c.ncclErr(call, r)
	c.abort(err)
	return err
}

// reserve grows the staging buffers to hold send and recv bytes.
func (c *comm) reserve(send, recv int) error {
	growD := func(b *devBuf, n int) error {
		if b.n >= n {
			return nil
		}
		if b.p != 0 {
			c.a.cudaFree(b.p)
			*b = devBuf{}
		}
		n = max(n, 4096)
		var p uintptr
		if r := c.a.cudaMalloc(&p, uintptr(n)); r != cudaSuccess {
			return fmt.Errorf("allocating %d bytes on GPU %d: %w", n, c.dev, c.cudaErr("cudaMalloc", r))
		}
		*b = devBuf{p, n}
		return nil
	}
	growH := func(b *hostBuf, n int) error {
		if b.n >= n {
			return nil
		}
		if b.p != nil {
			c.a.cudaFreeHost(b.p)
			*b = hostBuf{}
		}
		n = max(n, 4096)
		var p unsafe.Pointer
		if r := c.a.cudaMallocHost(&p, uintptr(n)); r != cudaSuccess {
			return fmt.Errorf("allocating %d bytes of pinned host memory: %w", n, c.cudaErr("cudaMallocHost", r))
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
	r := c.a.cudaMemcpyH2D(c.sendD.p+uintptr(off), unsafe.Add(c.hostS.p, off), uintptr(len(p)), cudaMemcpyHostToDevice, c.stream)
	if r != cudaSuccess {
		return c.cudaErr("cudaMemcpyAsync (host to device)", r)
	}
	return nil
}

// download queues the copy of n bytes of the device receive buffer at off
// to pinned memory; fetch reads them once the stream has finished.
func (c *comm) download(off, n int) error {
	if n == 0 {
		return nil
	}
	r := c.a.cudaMemcpyD2H(unsafe.Add(c.hostR.p, off), c.recvD.p+uintptr(off), uintptr(n), cudaMemcpyDeviceToHost, c.stream)
	if r != cudaSuccess {
		return c.cudaErr("cudaMemcpyAsync (device to host)", r)
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
	var call string
	var r int32
	err := c.onDevice(func() error {
		if err := c.reserve(len(send), recvLen); err != nil {
			return err
		}
		if err := c.upload(send, 0); err != nil {
			return err
		}
		call, r = launch(c.sendD.p, c.recvD.p)
		return nil
	})
	if err != nil {
		c.abort(err)
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := c.settle(ctx, call, r); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if out != nil {
		if err := c.onDevice(func() error { return c.download(0, len(out)) }); err != nil {
			c.abort(err)
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := c.poll(ctx, what, true); err != nil {
		return err
	}
	if out != nil {
		c.fetch(out, 0)
	}
	return nil
}

// destroy ends the communicator in order (ncclCommFinalize, bounded by
// timeout, then ncclCommDestroy) and frees its buffers; if finalizing fails
// or takes too long it aborts instead.
func (c *comm) destroy(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.h != 0 {
		if c.a.ncclCommFinalize != nil && !c.blocking {
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
		if c.h != 0 {
			if r := c.a.ncclCommDestroy(c.h); r != ncclSuccess {
				err = errors.Join(err, c.ncclErr("ncclCommDestroy", r))
			}
			c.h = 0
		}
		if c.dead == nil {
			c.dead = transport.ErrClosed
		}
	}
	if c.leak {
		// After an abort a kernel may still be stuck; cudaFree would wait
		// for the whole device. The memory goes with the process.
		return err
	}
	c.onDevice(func() error {
		if c.sendD.p != 0 {
			c.a.cudaFree(c.sendD.p)
		}
		if c.recvD.p != 0 {
			c.a.cudaFree(c.recvD.p)
		}
		if c.hostS.p != nil {
			c.a.cudaFreeHost(c.hostS.p)
		}
		if c.hostR.p != nil {
			c.a.cudaFreeHost(c.hostR.p)
		}
		if c.stream != 0 {
			c.a.cudaStreamDestroy(c.stream)
		}
		return nil
	})
	c.sendD, c.recvD, c.hostS, c.hostR, c.stream = devBuf{}, devBuf{}, hostBuf{}, hostBuf{}, 0
	return err
}
