package pipeline

import (
	"context"
	"reflect"
	"sync"
)

// Job is work for a helper goroutine of a Crew. A pointer to a struct that
// holds the job's arguments makes one without an allocation.
type Job interface {
	Run(ctx context.Context) error
}

// Crew runs the goroutines of one collective: the caller's and helpers
// started with Go, under one context that the first failure cancels, so
// that no goroutine waits for a message that will not come. Crews, their
// contexts and the goroutines' closures are reused, so a steady stream of
// collectives allocates nothing for them:
//
//	c := pipeline.StartCrew(ctx)
//	defer c.Release()
//	c.Go(&sender)                       // sender.Run(c.Context())
//	err := c.Wait(receive(c.Context())) // the caller's own part
type Crew struct {
	ctx    context.Context
	cancel context.CancelFunc
	parent context.Context // ctx's, when ctx can go back to the cache
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // the helpers' first error, a real one before a cancellation
}

var crews = sync.Pool{New: func() any { return new(Crew) }}

// StartCrew returns a crew whose context is a child of parent.
func StartCrew(parent context.Context) *Crew {
	c := crews.Get().(*Crew)
	c.ctx, c.cancel, c.parent = derive(parent)
	return c
}

// Context is the context of the crew's goroutines.
func (c *Crew) Context() context.Context { return c.ctx }

// task is a job and its crew, on their way to a goroutine.
type task struct {
	c *Crew
	j Job
}

// tasks hands jobs to the goroutines Go starts. Each Go queues one task
// before it starts one goroutine, and each goroutine takes one task, which
// need not be its own: every queued task has a goroutine on its way, so
// none waits long, and a full queue only makes Go wait for one to drain.
// A goroutine started on a function without a closure costs no allocation;
// a closure would.
var tasks = make(chan task, 256)

func runTask() {
	t := <-tasks
	t.c.record(t.j.Run(t.c.ctx))
	t.c.wg.Done()
}

// Go runs j.Run(c.Context()) on a goroutine of its own. Its error, unless
// nil, cancels the crew.
func (c *Crew) Go(j Job) {
	c.wg.Add(1)
	tasks <- task{c, j}
	go runTask()
}

// Fail cancels the crew: its goroutines' transport calls and waits return.
func (c *Crew) Fail() { c.cancel() }

// record keeps the first error of a helper, a real one rather than the
// cancellation it caused, and cancels the crew.
func (c *Crew) record(err error) {
	if err == nil {
		return
	}
	c.cancel()
	c.mu.Lock()
	if c.err == nil || Canceled(c.err) && !Canceled(err) {
		c.err = err
	}
	c.mu.Unlock()
}

// Wait takes the caller's own result, cancelling the crew if it failed,
// waits for the helpers and returns the error that explains the failure:
// own unless it is only the echo of a helper's (a cancellation), else the
// helpers' first.
func (c *Crew) Wait(own error) error {
	if own != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if own != nil && (err == nil || !Canceled(own)) {
		return own
	}
	return err
}

// Release gives the crew back, after Wait. It must not be used afterwards.
func (c *Crew) Release() {
	keep(c.parent, c.ctx, c.cancel)
	*c = Crew{}
	crews.Put(c)
}

// The contexts of crews are reused: a collective's goroutines need a
// context they can cancel, and context.WithCancel costs three allocations
// (and tcp's cancellation hooks, which it keeps per context, two more). A
// crew takes a live child of its parent from the cache when one is there,
// and gives it back uncancelled. A communicator passes the same context to
// one collective after another, so its collectives take turns with the
// same child.
const maxCached = 64

var cache struct {
	sync.Mutex
	free []cached
}

type cached struct {
	parent, ctx context.Context
	cancel      context.CancelFunc
}

// derive returns a cancellable child of parent, and parent again when the
// child may go back to the cache (parent is comparable), else nil.
func derive(parent context.Context) (ctx context.Context, cancel context.CancelFunc, key context.Context) {
	if reflect.TypeOf(parent).Comparable() {
		cache.Lock()
		for i := len(cache.free) - 1; i >= 0; i-- {
			e := cache.free[i]
			if e.parent != parent {
				continue
			}
			last := len(cache.free) - 1
			cache.free[i] = cache.free[last]
			cache.free[last] = cached{}
			cache.free = cache.free[:last]
			if e.ctx.Err() != nil { // the parent ended
				continue
			}
			cache.Unlock()
			return e.ctx, e.cancel, parent
		}
		cache.Unlock()
		key = parent
	}
	ctx, cancel = context.WithCancel(parent)
	return ctx, cancel, key
}

// keep gives a child from derive back: to the cache while it is live,
// else to the garbage collector.
func keep(parent, ctx context.Context, cancel context.CancelFunc) {
	if parent == nil || ctx.Err() != nil {
		cancel()
		return
	}
	cache.Lock()
	var evicted cached
	if len(cache.free) == maxCached {
		evicted = cache.free[0]
		copy(cache.free, cache.free[1:])
		cache.free = cache.free[:maxCached-1]
	}
	if cache.free == nil {
		cache.free = make([]cached, 0, maxCached)
	}
	cache.free = append(cache.free, cached{parent, ctx, cancel})
	cache.Unlock()
	if evicted.cancel != nil {
		evicted.cancel() // detaches it from its parent
	}
}
