package spin

import (
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	var b Budget
	if got := b.Next(); got != First {
		t.Fatalf("before any wait: %v, want First (%v)", got, First)
	}
	feed(&b, 50, 40*time.Microsecond)
	if got := b.Next(); got < 79*time.Microsecond || got > 81*time.Microsecond {
		t.Errorf("after waits of 40 us: %v, want about twice that", got)
	}
	// One long wait (a peer computing between collectives) does not stop
	// the polling that the typical wait pays for.
	b.Observe(time.Second)
	if got := b.Next(); got <= Min || got > Max {
		t.Errorf("after one 1 s wait among 30 us ones: %v, want between Min and Max", got)
	}
	// Waits that stay long: poll only Min.
	feed(&b, 50, 10*time.Millisecond)
	if got := b.Next(); got != Min {
		t.Errorf("after waits of 10 ms: %v, want Min (%v)", got, Min)
	}
	// Short again: it learns back.
	feed(&b, 100, 5*time.Microsecond)
	if got := b.Next(); got != First {
		t.Errorf("after waits of 5 us: %v, want First (%v), the floor of short waits", got, First)
	}
	feed(&b, 50, 400*time.Microsecond)
	if got := b.Next(); got < 790*time.Microsecond || got > 810*time.Microsecond {
		t.Errorf("after waits of 400 us: %v, want about 800 us", got)
	}
	// Bimodal waits, as with more ranks than cores: most messages are
	// there at once, one in four takes 300 us. The budget covers the long
	// ones (twice the average, about 160 us, would sleep through them).
	feed(&b, 100, 4*time.Microsecond)
	for i := range 40 {
		if i%4 == 3 {
			b.Observe(300 * time.Microsecond)
		} else {
			b.Observe(4 * time.Microsecond)
		}
	}
	if got := b.Next(); got < 300*time.Microsecond || got > Max {
		t.Errorf("after waits of 4 us with one in four of 300 us: %v, want at least 300 us (average %v, peak %v)", got, b.Average(), b.Peak())
	}
	// The peak decays: once the long waits stop, the budget falls back.
	feed(&b, 100, 4*time.Microsecond)
	if got := b.Next(); got != First {
		t.Errorf("after 100 waits of 4 us: %v, want First (%v)", got, First)
	}
	feed(&b, 50, 900*time.Microsecond)
	if got := b.Next(); got != Max {
		t.Errorf("after waits of 0.9 ms: %v, want Max (%v)", got, Max)
	}
}

func TestFixed(t *testing.T) {
	b := Fixed(200 * time.Microsecond)
	b.Observe(time.Second)
	if got := b.Next(); got != 200*time.Microsecond {
		t.Errorf("Fixed(200us) after a long wait: %v", got)
	}
	never := Fixed(-1)
	if got := never.Next(); got != 0 {
		t.Errorf("Fixed(-1): %v, want 0 (no polling)", got)
	}
	learn := Fixed(0)
	if got := learn.Next(); got != First {
		t.Errorf("Fixed(0): %v, want First: it learns", got)
	}
}

// TestWake: sleeps that cost more than the waits make the budget poll that
// long (up to MaxWake), unless the waits average past Max; Fixed budgets
// ignore it.
func TestWake(t *testing.T) {
	var b Budget
	feed(&b, 50, 5*time.Microsecond)
	if got := b.Next(); got != First {
		t.Fatalf("after waits of 5 us: %v, want First (%v)", got, First)
	}
	b.ObserveWake(500 * time.Microsecond)
	if got := b.Next(); got != WakeFactor*500*time.Microsecond {
		t.Errorf("after a sleep that cost 0.5 ms: %v, want WakeFactor (%d) times that", got, WakeFactor)
	}
	// A moving average: one cheap wake-up moves it a quarter of the way.
	b.ObserveWake(0)
	if got := b.Wake(); got < 374*time.Microsecond || got > 376*time.Microsecond {
		t.Errorf("after wake-ups of 0.5 ms and 0: %v, want 0.375 ms", got)
	}
	b.ObserveWake(time.Second)
	if got := b.Wake(); got > MaxWake {
		t.Errorf("after a wake-up of 1 s: %v, want at most MaxWake (%v)", got, MaxWake)
	}
	if got := b.Next(); got != MaxWake {
		t.Errorf("after a wake-up of 1 s: budget %v, want MaxWake (%v)", got, MaxWake)
	}
	// Waits longer than the wake-ups cost: twice the longest, up to Max.
	feed(&b, 100, 5*time.Microsecond)
	for range 40 {
		b.ObserveWake(20 * time.Microsecond)
	}
	feed(&b, 10, 300*time.Microsecond)
	if got := b.Next(); got < 590*time.Microsecond || got > 600*time.Microsecond {
		t.Errorf("after waits of 300 us and wake-ups of 20 us: %v, want about 600 us", got)
	}
	// A peer that computes between collectives: Min, whatever sleeps cost.
	b.ObserveWake(5 * time.Millisecond)
	feed(&b, 50, 10*time.Millisecond)
	if got := b.Next(); got != Min {
		t.Errorf("after waits of 10 ms: %v, want Min (%v)", got, Min)
	}
	// Forgotten over wakeMemory of waiting without a sleep: a budget that
	// polls long because sleeps were dear, and so never sleeps again, comes
	// back down.
	var d Budget
	feed(&d, 10, 5*time.Microsecond)
	d.ObserveWake(2 * time.Millisecond)
	feed(&d, 10, 20*time.Microsecond)
	if got := d.Next(); got < 7900*time.Microsecond || got > 8*time.Millisecond {
		t.Errorf("after a 2 ms wake-up and 200 us of waiting: %v, want about 8 ms", got)
	}
	feed(&d, 300, time.Millisecond)
	if got := d.Wake(); got > 100*time.Microsecond {
		t.Errorf("after 300 ms of waiting with no sleep: wake-up cost %v, want it forgotten", got)
	}
	f := Fixed(100 * time.Microsecond)
	f.ObserveWake(5 * time.Millisecond)
	if got := f.Next(); got != 100*time.Microsecond || f.Wake() != 0 {
		t.Errorf("Fixed(100us) after a 5 ms wake-up: %v (wake %v), want 100 us", got, f.Wake())
	}
}

// feed has b observe n waits of d each.
func feed(b *Budget, n int, d time.Duration) {
	for range n {
		b.Observe(d)
	}
}
