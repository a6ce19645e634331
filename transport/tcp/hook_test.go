package tcp

import (
	"context"
	"errors"
	"testing"
	"time"
)

// uncomparable is a context whose type cannot be compared, as a context
// type with a slice field would be.
type uncomparable struct {
	context.Context
	_ []int
}

// A stream keeps its cancellation hooks for the contexts of its last
// calls; ending one of those contexts later must not cut short a call
// under another, while ending the context of a call in progress does.
// Contexts that cannot be compared are hooked per call.
func TestKeptHooks(t *testing.T) {
	ts := newWorld(t, 2, nil, nil)
	big := make([]byte, 256<<10) // past smallMax: the hooked path
	h := hdr(0)
	exchange := func(send, recv context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- ts[1].Recv(recv, 0, h, big) }()
		err := ts[0].Send(send, 1, h, big)
		return errors.Join(err, <-errc)
	}
	a, cancelA := context.WithCancel(context.Background())
	b, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	c := uncomparable{Context: b}
	for _, ctx := range []context.Context{a, b, c, a, b, c} {
		if err := exchange(ctx, ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancelA() // its hooks are still registered on both streams
	for _, ctx := range []context.Context{b, c, context.Background()} {
		if err := exchange(ctx, ctx); err != nil {
			t.Fatalf("a call after an earlier call's context ended: %v", err)
		}
	}

	// A receive waiting under a kept context ends when that context does
	// (or fails at once if it ended first).
	d, cancelD := context.WithCancel(context.Background())
	if err := exchange(d, d); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- ts[1].Recv(d, 0, h, big) }()
	cancelD()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("a receive whose context ended returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a receive whose context ended is still waiting")
	}
	if err := ts[0].Send(a, 1, h, big); err == nil {
		t.Fatal("a send under an ended context went through")
	}
}

// A cancel that comes after arm has registered its hook but before the
// side's deadline is set cuts the call short, and setting the deadline
// afterwards leaves the cut in place: otherwise the call would go on
// waiting with no deadline (a Recv canceled as it stopped polling hung
// until the conformance suite's 10 s limit, once in CI).
func TestCancelBeforeDeadlineStands(t *testing.T) {
	cuts := make(chan time.Time, 4)
	k := &hook{cut: func(dl time.Time) error { cuts <- dl; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	if err := k.arm(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case dl := <-cuts:
		if !dl.Equal(aLongTimeAgo) {
			t.Fatalf("the cancel set the deadline %v, want one in the past", dl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel did not cut the call short within 10 s")
	}
	if err := k.deadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	select {
	case dl := <-cuts:
		t.Fatalf("after the cancel the side's deadline was set again, to %v: the call would wait on", dl)
	default:
	}
	k.done()

	// The next call sets its deadline as usual.
	if err := k.arm(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := time.Now().Add(time.Minute)
	if err := k.deadline(want); err != nil {
		t.Fatal(err)
	}
	if dl := <-cuts; !dl.Equal(want) || !k.dl.Equal(want) || !k.dlOK {
		t.Fatalf("next call: deadline set to %v (recorded %v, known %v), want %v", dl, k.dl, k.dlOK, want)
	}
	k.done()
}
