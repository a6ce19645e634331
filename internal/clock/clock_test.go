package clock

import (
	"testing"
	"time"
)

// After its first calibration Since agrees with time.Since, read just
// before and just after it, to within tol, on every one of many reads
// over 1.2 s (through the calibrations at 120 and 720 ms); and it never
// goes back by more than tol.
func TestSinceAgrees(t *testing.T) {
	const tol = 50 * time.Microsecond
	Since()
	time.Sleep(firstAfter + 5*time.Millisecond)
	Since()
	if !counterUsable() {
		if TSC() {
			t.Fatal("the counter is in use where it is not usable")
		}
		t.Log("the counter is not usable here: Since is time.Since")
	} else if !TSC() {
		t.Fatalf("the counter is usable but not in use %v after the first call", firstAfter+5*time.Millisecond)
	}
	var last time.Duration
	end := time.Now().Add(1200 * time.Millisecond)
	for n := 0; time.Now().Before(end); n++ {
		a := time.Since(base)
		s := Since()
		b := time.Since(base)
		if b-a > bracket {
			continue // preempted between the reads: they say nothing
		}
		if s < a-tol || s > b+tol {
			t.Fatalf("read %d: Since %v, time.Since %v and %v around it", n, s, a, b)
		}
		if s < last-tol {
			t.Fatalf("read %d: Since %v after %v", n, s, last)
		}
		last = s
		if n%1000 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if counterUsable() && !TSC() {
		t.Error("the counter was given up: its rate drifted more than 0.1% between calibrations")
	}
}

// A calibration's rate comes from its two pairs, it starts from the
// later one's time, and it serves five times their span, at most a second.
func TestCalibrate(t *testing.T) {
	first := pair{tick: 1000, at: 0}
	p := pair{tick: 1000 + 3_000_000_000, at: time.Second} // 3 ticks a ns
	c := calibrate(first, p)
	if c.at != time.Second || c.tick != p.tick {
		t.Fatalf("anchored at %v, tick %d: want %v, %d", c.at, c.tick, time.Second, p.tick)
	}
	if got := scale(3_000_000, c.mult); got < 999_999 || got > 1_000_001 {
		t.Errorf("3e6 ticks scale to %d ns, want 1e6", got)
	}
	if c.horizon < 2_999_000_000 || c.horizon > 3_001_000_000 {
		t.Errorf("horizon %d ticks, want a second's, 3e9", c.horizon)
	}
	// The first calibration, 20 ms in: it serves 100 ms.
	p = pair{tick: 1000 + 60_000_000, at: 20 * time.Millisecond}
	if c := calibrate(first, p); c.horizon < 299_000_000 || c.horizon > 301_000_000 {
		t.Errorf("after 20 ms: horizon %d ticks, want 100 ms's, 3e8", c.horizon)
	}
}

// COLLKIT_TSC=0 turns the counter off.
func TestEnvOff(t *testing.T) {
	t.Setenv(Env, "0")
	if counterUsable() {
		t.Fatal("usable with COLLKIT_TSC=0")
	}
}

func BenchmarkSince(b *testing.B) {
	Since()
	time.Sleep(firstAfter + time.Millisecond)
	for range b.N {
		Since()
	}
}

func BenchmarkTimeSince(b *testing.B) {
	for range b.N {
		time.Since(base)
	}
}

// A rate since the last calibration within 0.1% of the one it served
// with keeps the counter; one further off gives it up.
func TestDrifted(t *testing.T) {
	first := pair{tick: 0, at: 0}
	last := calibrate(first, pair{tick: 300_000_000, at: 100 * time.Millisecond}) // 3 ticks a ns
	for _, tc := range []struct {
		ticks uint64 // 400 ms after last
		want  bool
	}{
		{1_200_000_000, false}, // in step
		{1_200_500_000, false}, // 4e-4 fast
		{1_199_500_000, false}, // 4e-4 slow
		{1_203_000_000, true},  // 2.5e-3 fast
		{1_080_000_000, true},  // 10% slow: another host's rate
	} {
		p := pair{tick: last.tick + tc.ticks, at: last.at + 400*time.Millisecond}
		if got := drifted(last, p); got != tc.want {
			t.Errorf("%d ticks in 400 ms after 3 a ns: drifted %v, want %v", tc.ticks, got, tc.want)
		}
	}
}
