// Package clock reads a monotonic clock for the per-call bookkeeping of
// collectives (statistics, timeouts, wait budgets) at half the cost of
// time.Since where it can.
//
// time.Since reads the kernel's clock through the vDSO, which Go enters on
// the system stack: 30-55 ns a read on the 2-vCPU VMs, two or three times
// in every collective (with collbench's), a sixth of an 8-byte all-reduce
// over shared memory. Where the kernel's clock is itself the CPU's
// time-stamp counter scaled (its clocksource is tsc, or kvm-clock served
// by the vDSO: see counterUsable) and the CPU says the counter runs at a
// constant rate through frequency and sleep states, Since reads the
// counter (RDTSC: 11-25 ns) and scales it by a rate measured against
// time.Since, from the first reading (at Since's first call) to one taken
// when the last calibration runs out: the first after 20 ms (time.Since
// serves until then), each next after five times the span it was measured
// over, at most a second. Each calibration starts from its own reading of
// time.Since, so an error of the rate never outlives it: Since stays
// within about 10 us of time.Since in the process's first second and 3 us
// after, and may step by that much when a calibration replaces the last
// (a duration that spans it can come out a little short, or below zero).
// A calibration that finds the rate since the last one more than 0.1% off
// turns the counter off for good. Elsewhere Since is time.Since.
package clock

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// base is what Since counts from.
var base = time.Now()

// Base is the time Since counts from: Base().Add(Since()) is now.
func Base() time.Time { return base }

// Since returns the monotonic time since Base.
func Since() time.Duration {
	if c := current.Load(); c != nil {
		if d := ticks() - c.tick; d < c.horizon {
			return c.at + time.Duration(scale(d, c.mult))
		}
	}
	return slow()
}

// TSC reports whether Since reads the time-stamp counter now, rather than
// time.Since.
func TSC() bool { return current.Load() != nil }

// A calibration: Since is at + (ticks()-tick) * mult / 2^32 nanoseconds
// while ticks()-tick is below horizon.
type calibration struct {
	tick    uint64
	at      time.Duration
	mult    uint64
	horizon uint64
}

// scale is d * mult / 2^32, without overflow.
func scale(d, mult uint64) uint64 {
	hi, lo := bits.Mul64(d, mult)
	return hi<<32 | lo>>32
}

const (
	// firstAfter is how long time.Since serves before the first rate.
	firstAfter = 20 * time.Millisecond
	// serveSpans is how many times the span its rate was measured over a
	// calibration serves, and maxServe the longest: a rate measured over
	// 20 ms with readings 2 us apart is off by up to 1e-4, 10 us over 100
	// ms.
	serveSpans = 5
	maxServe   = time.Second
	// bracket is the most two time.Since reads around one RDTSC may lie
	// apart for a pair of readings to count: a preemption between them
	// would put the pair's time off by as much.
	bracket = 2 * time.Microsecond
)

// The calibration state, under mu but for current.
var (
	current atomic.Pointer[calibration]
	mu      sync.Mutex
	state   atomic.Int32 // checking, measuring or off; set under mu
	first   pair         // the first pair, when measuring
)

const (
	checking  = iota // the counter's use not decided yet
	measuring        // first is read; calibrations follow
	off              // time.Since only
)

// A pair is a counter reading and time.Since at one moment.
type pair struct {
	tick uint64
	at   time.Duration
}

// read takes a pair, retrying while the reads around the counter lie
// further apart than bracket; ok false after a few tries.
func read() (p pair, ok bool) {
	for range 8 {
		a := time.Since(base)
		t := ticks()
		b := time.Since(base)
		if b-a <= bracket {
			return pair{t, a + (b-a)/2}, true
		}
	}
	return pair{}, false
}

// slow is Since before the first calibration, where the counter is not
// used, and once a calibration has served its time: it calibrates when it
// is time to.
func slow() time.Duration {
	now := time.Since(base)
	if state.Load() == off {
		return now
	}
	mu.Lock()
	defer mu.Unlock()
	switch state.Load() {
	case checking:
		state.Store(off)
		if counterUsable() {
			if p, ok := read(); ok {
				first = p
				state.Store(measuring)
			}
		}
		return now
	case off:
		return now
	}
	if now-first.at < firstAfter {
		return now
	}
	if c := current.Load(); c != nil && ticks()-c.tick < c.horizon {
		return now // another caller calibrated while this one waited
	}
	p, ok := read()
	if !ok || p.tick <= first.tick || p.at <= first.at {
		return now
	}
	if last := current.Load(); last != nil && drifted(last, p) {
		state.Store(off)
		current.Store(nil)
		return now
	}
	c := calibrate(first, p)
	current.Store(c)
	return c.at
}

// maxDrift is how far the counter's rate since the last calibration may
// lie from the rate that calibration served with before Since gives the
// counter up for good: a rate the host changed (a guest restored on
// another machine, or a counter that does not run in step) put every
// duration off by as much. Pairs 2 us apart at most over 100 ms or more
// measure a rate to 4e-5.
const maxDrift = 1e-3

// drifted reports whether the rate from last's pair to p differs from
// last's by more than maxDrift.
func drifted(last *calibration, p pair) bool {
	recent := calibrate(pair{last.tick, last.at}, p)
	r := float64(recent.mult) / float64(last.mult)
	return r > 1+maxDrift || r < 1-maxDrift
}

// calibrate makes the calibration that starts at p, with the rate from
// first to p, to serve serveSpans times that span, at most maxServe.
func calibrate(first, p pair) *calibration {
	ns := uint64(p.at - first.at)
	mult, _ := bits.Div64(ns>>32, ns<<32, p.tick-first.tick)
	c := &calibration{tick: p.tick, at: p.at, mult: max(mult, 1)}
	serve := uint64(min(serveSpans*(p.at-first.at), maxServe))
	c.horizon, _ = bits.Div64(serve>>32, serve<<32, c.mult)
	c.horizon = max(c.horizon, 1)
	return c
}

// Env set to 0 turns the counter off: Since is then time.Since.
const Env = "COLLKIT_TSC"
