// Package pipeline holds what every segment-pipelined algorithm needs: a
// counter through which one goroutine tells another that segments are ready,
// a crew of goroutines that share a cancellable context (Crew), pooled
// staging buffers for incoming segments, and small buffer checks. None of
// them allocates per collective once warm.
package pipeline

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/collkit/collkit/internal/bufpool"
	"github.com/collkit/collkit/transport"
)

// Progress counts finished segments so that another goroutine can act on
// each one as soon as it is ready. Call Init before use.
type Progress struct {
	done atomic.Int64
	wake chan struct{}
}

// Init starts a new count. Call it only while nobody waits.
func (g *Progress) Init() {
	g.done.Store(0)
	if g.wake == nil {
		g.wake = make(chan struct{}, 1)
		return
	}
	select {
	case <-g.wake:
	default:
	}
}

// NewProgress returns an initialized Progress.
func NewProgress() *Progress {
	g := &Progress{}
	g.Init()
	return g
}

// Add records one more finished segment.
func (g *Progress) Add() {
	g.done.Add(1)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Wait returns once n segments are finished, or ctx's error.
func (g *Progress) Wait(ctx context.Context, n int64) error {
	for g.done.Load() < n {
		select {
		case <-g.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Stage returns a staging buffer of n bytes (its B) from the shared pools
// (internal/bufpool); give it back with Release.
func Stage(n int) *bufpool.Buffer { return bufpool.Get(n) }

// Release returns a buffer from Stage to the pool.
func Release(b *bufpool.Buffer) { bufpool.Put(b) }

// Span starts a span on t when t records them (transport.Spanner) and
// returns its end; otherwise it returns a function that does nothing.
func Span(t transport.Transport, name string, step uint32) (end func()) {
	if s, ok := t.(transport.Spanner); ok {
		return s.Span(name, step)
	}
	return nothing
}

func nothing() {}

// SameBuffer reports whether a and b start at the same byte (an in-place
// call), or are both empty.
func SameBuffer(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] || len(a) == 0 && len(b) == 0
}

// Canceled reports whether err comes from a canceled context: the echo of
// another goroutine's failure rather than a failure of its own.
func Canceled(err error) bool { return errors.Is(err, context.Canceled) }
