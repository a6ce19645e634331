package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/collkit/collkit/algo/pipeline"
)

// jobFunc is a Job; the tests' closures make it allocate, which the
// allocation test avoids.
type jobFunc func(ctx context.Context) error

func (f jobFunc) Run(ctx context.Context) error { return f(ctx) }

// A helper's failure cancels the others (the caller's part included) and is
// what Wait returns, rather than the cancellations it caused.
func TestCrewHelperFailureCancels(t *testing.T) {
	boom := errors.New("boom")
	c := pipeline.StartCrew(context.Background())
	defer c.Release()
	started := make(chan struct{})
	c.Go(jobFunc(func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // waits for the failure below
		return ctx.Err()
	}))
	c.Go(jobFunc(func(context.Context) error { <-started; return boom }))
	<-c.Context().Done()
	own := c.Context().Err() // the caller's part was cut short too
	if err := c.Wait(own); err != boom {
		t.Fatalf("Wait = %v, want the helper's %v", err, boom)
	}
}

// The caller's own failure cancels the helpers and is preferred to theirs.
func TestCrewOwnFailureWins(t *testing.T) {
	mine, theirs := errors.New("mine"), errors.New("theirs")
	c := pipeline.StartCrew(context.Background())
	defer c.Release()
	c.Go(jobFunc(func(ctx context.Context) error {
		<-ctx.Done()
		return theirs
	}))
	if err := c.Wait(mine); err != mine {
		t.Fatalf("Wait = %v, want %v", err, mine)
	}
	if c.Context().Err() == nil {
		t.Fatal("the crew's context was not cancelled")
	}
}

// A crew whose parent ends sees it.
func TestCrewParentCancel(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	c := pipeline.StartCrew(parent)
	defer c.Release()
	c.Go(jobFunc(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	cancel()
	if err := c.Wait(nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// Crews under one parent take turns with one context while it is live,
// and a cancelled one is never handed out again.
func TestCrewContextReuse(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop crews")
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := pipeline.StartCrew(parent)
	first := c.Context()
	if err := c.Wait(nil); err != nil {
		t.Fatal(err)
	}
	c.Release()
	c = pipeline.StartCrew(parent)
	if c.Context() != first {
		t.Error("a second crew under the same parent got a new context")
	}
	c.Fail()
	c.Wait(nil)
	c.Release()
	c = pipeline.StartCrew(parent)
	defer c.Release()
	if c.Context() == first || c.Context().Err() != nil {
		t.Error("a cancelled context was handed out again")
	}
}

type nop struct{}

func (nop) Run(context.Context) error { return nil }

// Starting a crew, a helper and waiting allocates nothing once warm.
func TestCrewNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates and makes sync.Pool drop crews")
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var j nop
	round := func() {
		c := pipeline.StartCrew(parent)
		c.Go(&j)
		c.Go(&j)
		if err := c.Wait(nil); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	round()
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%v allocations per crew of two helpers", a)
	}
}
