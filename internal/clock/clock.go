// Package clock reads a monotonic clock for the per-call bookkeeping of
// collectives (statistics, timeouts, wait budgets) at half the cost of
// time.Since where it can.
//
// time.Since reads the kernel's clock through the vDSO, which Go enters on
// the system stack: 50-55 ns a read on the 2-vCPU VMs, twice in every
// collective, a tenth of an 8-byte all-reduce over shared memory. Where the
// kernel itself counts time with the CPU's time-stamp counter (its
// clocksource is tsc, and the CPU says the counter runs at a constant rate
// through frequency and sleep states), Since reads the counter (RDTSC: 25
// ns there) and scales it by a rate measured against time.Since: first
// over the first 20 ms after Since's first call (time.Since serves until
// then), then again about every second, always from that first reading, so
// that the rate's error shrinks as the process runs. Since stays within a
// few microseconds of time.Since, and may step by that much when a
// calibration replaces the last (a duration that spans it can come out a
// little short, or below zero). Elsewhere Since is time.Since.
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
// while ticks()-tick is below horizon, about a second.
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
	// recalibrate is how long a calibration serves.
	recalibrate = time.Second
	// bracket is the most two time.Since reads around one RDTSC may lie
	// apart for a pair of readings to count: a preemption between them
	// would put the pair's time off by as much.
	bracket = 2 * time.Microsecond
	// maxStep is the most a new calibration may disagree with the last at
	// the same moment and still continue it (rather than start from its
	// own pair): the counter jumped, or the machine was suspended.
	maxStep = 100 * time.Microsecond
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
// used, and once a calibration has served its second: it calibrates when
// it is time to.
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
	c := calibrate(first, p, current.Load())
	current.Store(c)
	return c.at
}

// calibrate makes the calibration that starts at p, with the rate from
// first to p, continuing last where it agrees with p.
func calibrate(first, p pair, last *calibration) *calibration {
	ns := uint64(p.at - first.at)
	mult, _ := bits.Div64(ns>>32, ns<<32, p.tick-first.tick)
	c := &calibration{tick: p.tick, at: p.at, mult: max(mult, 1)}
	c.horizon, _ = bits.Div64(uint64(recalibrate)>>32, uint64(recalibrate)<<32, c.mult)
	if last != nil && p.tick > last.tick {
		cont := last.at + time.Duration(scale(p.tick-last.tick, last.mult))
		if step := cont - p.at; step < maxStep && step > -maxStep {
			c.at = cont
		}
	}
	return c
}

// Env set to 0 turns the counter off: Since is then time.Since.
const Env = "COLLKIT_TSC"
