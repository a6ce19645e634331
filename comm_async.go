package collkit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/collkit/collkit/internal/release"
)

// ErrConcurrentUse is wrapped by the error of a call made on a Comm while
// another goroutine was inside a call on it, and by the error of that other
// call: ranks that reach two calls in different orders would pair them
// wrongly and swap their results, so the communicator fails on every rank
// instead. Issue the calls of one communicator from one goroutine at a time
// (start them with the Async methods to have them run while that goroutine
// goes on, and Wait for them anywhere), or Split a communicator per
// goroutine.
var ErrConcurrentUse = errors.New("communicator used by two goroutines at once")

// Work is an operation started without waiting (AllReduceAsync,
// Group.Start, ...). Its buffers belong to the operation until it is done:
// read or write them only after Wait returns or Done is closed.
//
// The operations of one communicator run one at a time in the order they
// were started, on every rank, with blocking calls taking their turn after
// every operation started before them; so every rank must start the same
// operations in the same order, as it would call them. Each operation's
// timeout (Options.Timeout) starts when it begins to run, not when it was
// started. A failure is fatal to the communicator as for a blocking call:
// the operations queued behind it fail with ErrAborted.
type Work struct {
	c    *Comm
	name callName
	ctx  context.Context
	op   operation
	done chan struct{}
	err  error // set before done is closed
}

// operation is what a call runs: a collective's arguments, or a function.
// It is a value, so that a blocking collective passes it down without an
// allocation (a closure over the arguments would escape to the heap, since
// a call queued behind started operations keeps it in a Work).
type operation struct {
	kind       opKind
	dt         DType
	op         Op
	send, recv []byte
	root       int                         // the root, or the peer of a send or receive
	fn         func(context.Context) error // opFunc
}

type opKind uint8

const (
	opFunc opKind = iota
	opAllReduce
	opBroadcast
	opReduce
	opAllGather
	opReduceScatter
	opGather
	opScatter
	opAllToAll
	opBarrier
	opSend
	opRecv
)

// funcOp is the operation that runs fn.
func funcOp(fn func(context.Context) error) operation { return operation{fn: fn} }

// runOp runs o in its turn. The caller holds c.mu.
func (c *Comm) runOp(ctx context.Context, o *operation) error {
	switch o.kind {
	case opAllReduce:
		return c.allReduce(ctx, o.dt, o.op, o.send, o.recv)
	case opBroadcast:
		return c.broadcast(ctx, o.dt, o.recv, o.root)
	case opReduce:
		return c.reduce(ctx, o.dt, o.op, o.send, o.recv, o.root)
	case opAllGather:
		return c.allGather(ctx, o.dt, o.send, o.recv)
	case opReduceScatter:
		return c.reduceScatter(ctx, o.dt, o.op, o.send, o.recv)
	case opGather:
		return c.gather(ctx, o.dt, o.send, o.recv, o.root)
	case opScatter:
		return c.scatter(ctx, o.dt, o.send, o.recv, o.root)
	case opAllToAll:
		return c.allToAll(ctx, o.dt, o.send, o.recv)
	case opBarrier:
		return c.barrier(ctx)
	case opSend:
		return c.send(ctx, o.dt, o.send, o.root)
	case opRecv:
		return c.recv(ctx, o.dt, o.recv, o.root)
	}
	return o.fn(ctx)
}

// Wait returns the operation's error once it is done, or ctx's error if ctx
// ends first; the operation then goes on under the context it was started
// with. Wait may be called from any goroutine, any number of times.
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	default:
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return fmt.Errorf("collkit: rank %d: waiting for %s: %w (the operation is still running)", w.c.Rank(), w.name, ctx.Err())
	}
}

// Done is closed when the operation is done.
func (w *Work) Done() <-chan struct{} { return w.done }

// Test reports without blocking whether the operation is done, and its
// error if it is (like MPI_Test).
func (w *Work) Test() (done bool, err error) {
	select {
	case <-w.done:
		return true, w.err
	default:
		return false, nil
	}
}

// callName names a call, for ErrConcurrentUse; zero is none.
type callName uint32

const (
	nameAllReduce callName = iota + 1
	nameBroadcast
	nameReduce
	nameAllGather
	nameReduceScatter
	nameGather
	nameScatter
	nameAllToAll
	nameBarrier
	nameSend
	nameRecv
	nameGroup
	nameSplit
	nameTrace
	nameSetAlgorithm
	nameAllReduceDevice
	nameBroadcastDevice
	nameReduceDevice
	nameAllGatherDevice
	nameReduceScatterDevice
	nameGroupDevice
)

var callNames = [...]string{
	nameAllReduce:           "allreduce",
	nameBroadcast:           "broadcast",
	nameReduce:              "reduce",
	nameAllGather:           "allgather",
	nameReduceScatter:       "reducescatter",
	nameGather:              "gather",
	nameScatter:             "scatter",
	nameAllToAll:            "alltoall",
	nameBarrier:             "barrier",
	nameSend:                "send",
	nameRecv:                "recv",
	nameGroup:               "group",
	nameSplit:               "split",
	nameTrace:               "trace",
	nameSetAlgorithm:        "setalgorithm",
	nameAllReduceDevice:     "allreduce (device memory)",
	nameBroadcastDevice:     "broadcast (device memory)",
	nameReduceDevice:        "reduce (device memory)",
	nameAllGatherDevice:     "allgather (device memory)",
	nameReduceScatterDevice: "reducescatter (device memory)",
	nameGroupDevice:         "group (device memory)",
}

func (n callName) String() string {
	if int(n) < len(callNames) && callNames[n] != "" {
		return callNames[n]
	}
	return "another call"
}

// engine is the state behind ordering and concurrent-use checks; it lives in
// Comm.
type engine struct {
	// busy is the call a caller is inside, or 0. exit clears it with a
	// release store (a MOV on x86, where a pointer could only be cleared
	// with sync/atomic's XCHG, a locked instruction: 5-8% of
	// BenchmarkCallOverhead).
	busy    atomic.Uint32
	misuse  atomic.Pointer[error] // the first ErrConcurrentUse error
	cancel  atomic.Pointer[context.CancelCauseFunc]
	pending atomic.Int64 // started operations not yet finished

	queue chan *Work // drained by one goroutine while pending > 0
}

// enter marks c busy with the call name until exit. A caller that finds it
// busy gets ErrConcurrentUse, and the call in progress is interrupted: the
// communicator fails, and its abort notice reaches every rank.
func (c *Comm) enter(name callName) error {
	if c.eng.busy.CompareAndSwap(0, uint32(name)) {
		return nil
	}
	other := callName(c.eng.busy.Load()).String()
	err := fmt.Errorf("collkit: rank %d: %s: %w: it was called while %s was running on another goroutine; "+
		"ranks that see two calls in different orders would swap their results, so this communicator is now closed on every rank. "+
		"Make the calls of one Comm from one goroutine (the Async methods let it go on while they run) or Split a communicator per goroutine",
		c.Rank(), name, ErrConcurrentUse, other)
	c.eng.misuse.CompareAndSwap(nil, &err)
	if cancel := c.eng.cancel.Load(); cancel != nil {
		(*cancel)(err)
	}
	return err
}

// exit ends a call that enter began. A call during which another goroutine
// called in returns the ErrConcurrentUse error rather than its own result,
// which may have been paired with the other call's on some ranks.
func (c *Comm) exit(err error) error {
	release.Uint32(&c.eng.busy, 0)
	if m := c.eng.misuse.Load(); m != nil && err == nil {
		return *m
	}
	return err
}

// call runs one blocking operation on behalf of the caller: run, after every
// operation started before it, or argErr, an invalid argument on this rank,
// which fails the communicator so that the other ranks fail at this call too
// rather than wait for this rank until their timeout.
func (c *Comm) call(ctx context.Context, name callName, o operation, argErr error) error {
	if err := c.enter(name); err != nil {
		return err
	}
	if argErr != nil {
		o = funcOp(c.rejected(argErr))
	}
	if c.eng.pending.Load() == 0 {
		return c.exit(c.locked(func() error { return c.runOp(ctx, &o) }))
	}
	w := c.submit(ctx, name, o)
	<-w.done
	return c.exit(w.err)
}

// start starts one operation without waiting (see call).
func (c *Comm) start(ctx context.Context, name callName, o operation, argErr error) *Work {
	if err := c.enter(name); err != nil {
		w := &Work{c: c, name: name, done: make(chan struct{}), err: err}
		close(w.done)
		return w
	}
	if argErr != nil {
		o = funcOp(c.rejected(argErr))
	}
	w := c.submit(ctx, name, o)
	c.exit(nil)
	return w
}

// rejected is the operation of a call with invalid arguments: it fails the
// communicator with argErr, unless it failed already.
func (c *Comm) rejected(argErr error) func(context.Context) error {
	return func(context.Context) error {
		if err := c.usable(); err != nil {
			return err
		}
		return c.fail(argErr)
	}
}

// submit queues an operation; the queue's goroutine runs while operations
// are pending and ends when none are.
func (c *Comm) submit(ctx context.Context, name callName, o operation) *Work {
	w := &Work{c: c, name: name, ctx: ctx, op: o, done: make(chan struct{})}
	c.startQueue()
	if c.eng.pending.Add(1) == 1 {
		go c.drain()
	}
	c.eng.queue <- w
	return w
}

// queueDepth bounds the operations started and not yet run; a caller that
// starts more waits for room.
const queueDepth = 1024

func (c *Comm) startQueue() {
	if c.eng.queue == nil { // only callers, one at a time, get here
		c.eng.queue = make(chan *Work, queueDepth)
	}
}

// drain runs queued operations in order until none are pending.
func (c *Comm) drain() {
	for {
		w := <-c.eng.queue
		w.err = c.locked(func() error { return c.runOp(w.ctx, &w.op) })
		close(w.done)
		if c.eng.pending.Add(-1) == 0 {
			return
		}
	}
}
