// Package spin decides how long a receiver polls for its next message
// before it sleeps, from how long its recent waits took, and how it gives
// up the core between polls (Yield).
//
// Polling (with sched_yield between polls, so that a rank this one waits
// for can have the core when ranks outnumber cores) saves the wake-up a
// sleeping receiver pays: tens of microseconds, more than a small message
// takes to cross loopback or shared memory. Polling for a message that is
// far away only burns a core. No constant is right for both: with 4 ranks
// on 2 cores a peer's answer takes longer than with 2, and a large
// message's longer still. A Budget learns the waits of one link and polls
// for twice the longest recent one (a maximum that decays by 1/16 per
// wait), within [First, Max]: never less than the fixed 50 us it replaces,
// which fast links (2 ranks on 2 cores) were measured to need; waits
// longer than Max on average, as when the peer computes between
// collectives, make it poll only Min before sleeping.
//
// The longest recent wait, not the average: with more ranks than cores the
// waits are bimodal (the message is there already, or the sender first
// needs the core a rank beside this one holds), and a budget of twice the
// average sleeps through exactly the long ones that polling is for. Every
// such sleep delays the ranks downstream until their waits overrun their
// own budgets too. Measured with 4 ranks on 2 cores (tcp ring all-reduce,
// 16 KiB): waits 4 us at the median and 500 us at the 90th percentile.
//
// A sleep costs what waking from it costs, and that is not a constant
// either: a few microseconds on an idle machine, milliseconds on a virtual
// machine whose host is busy, where a core that goes idle is given to
// another guest and comes back only when the host gets round to it. A
// receiver that slept tells the Budget how long after its message arrived
// it got to run again (ObserveWake; the tcp transport reads the arrival
// from the kernel's receive timestamp), and the Budget polls for WakeFactor
// times that long (up to MaxWake). Polling as long as a sleep costs would
// never lose more than twice the best choice made knowing the wait in
// advance, if the sleeper alone paid for its sleep; in a collective the
// ranks downstream wait for it too, and each of their waits overruns its
// budget in turn. It also keeps the wake-ups out of the waits it learns
// from: they are the receiver's delay, not the peer's.
//
// Measured on a 2-core VM while its host took 20-40% of its time (steal):
// at 2 ranks (tcp, 8 bytes), 0.3-1.5% of the receives slept, for 1.2-2 ms
// each on average (a median of 0.7-1.6 ms), and an exchange took 13-23 us
// against 8-13 for a bare polling loop in the same processes at the same
// time; at 4 ranks (the headline ring, 16 KiB) the ranks slept 25-117
// times a run, each wake-up costing 0.7-1.9 ms. Polling for the wake-up's
// cost alone took the headline to 284 us (median of 5 alternating runs),
// 4 times it to 169, 16 times to 173, never sleeping to 164, and Open MPI,
// which never sleeps, 190.
package spin

import "time"

// Bounds of a learned budget.
const (
	// First is the budget before any wait was seen, and the least a link
	// whose waits are short polls.
	First = 50 * time.Microsecond
	// Min is the budget when the waits are long: a short poll still
	// catches a message that arrives just after the call.
	Min = 20 * time.Microsecond
	// Max is the longest a receiver polls: beyond a scheduler's time
	// slice or so, the peer is not about to answer.
	Max = time.Millisecond
	// MaxWake is the longest a receiver polls because sleeping has
	// cost that much lately (see ObserveWake).
	MaxWake = 10 * time.Millisecond
	// WakeFactor times what a sleep costs is the least a receiver polls
	// (see the package comment).
	WakeFactor = 4
	// wakeMemory is how much waiting, without a sleep to measure it
	// again, makes a Budget forget what sleeps cost (by a factor e): a
	// budget that polls long because sleeps were dear stops sleeping, so
	// nothing else would ever lower it.
	wakeMemory = 100 * time.Millisecond
	// outlier caps what one wait adds to the average, so that a peer
	// that computed for a second between two collectives does not make
	// the next hundred waits sleep.
	outlier = 2 * Max
)

// Budget is one link's polling budget. One goroutine at a time uses it
// (the link's receiver); the zero value learns.
type Budget struct {
	fixed time.Duration // > 0: always this; < 0: never poll; 0: learn
	avg   time.Duration // moving average of waits; 0 before the first
	peak  time.Duration // the longest recent wait up to Max, decaying
	wake  time.Duration // moving average of what waking from a sleep cost, up to MaxWake
}

// Fixed returns a Budget that always polls for d, or never when d < 0.
// Fixed(0) learns, like the zero Budget.
func Fixed(d time.Duration) Budget { return Budget{fixed: d} }

// Next is how long the next wait may poll before it sleeps.
func (b *Budget) Next() time.Duration {
	switch {
	case b.fixed != 0:
		return max(b.fixed, 0)
	case b.avg == 0:
		return First
	case b.avg > Max:
		return Min
	}
	return max(min(max(2*b.peak, First), Max), min(WakeFactor*b.wake, MaxWake))
}

// Observe records how long a wait took, from its start to the message's
// arrival, whether it polled or slept: for a sleep, without what waking
// cost (see ObserveWake).
func (b *Budget) Observe(waited time.Duration) {
	if b.fixed != 0 {
		return
	}
	waited = min(max(waited, 1), outlier)
	b.wake -= b.wake * waited / wakeMemory
	b.peak -= b.peak / 16
	if waited <= Max {
		b.peak = max(b.peak, waited)
	}
	if b.avg == 0 {
		b.avg = waited
		return
	}
	b.avg += (waited - b.avg) / 8
}

// ObserveWake records what a sleep cost: how long after the message
// arrived the sleeping receiver got to run again. The budget then polls
// at least WakeFactor times that cost lately (a moving average, forgotten
// over wakeMemory of waiting without a sleep), up to MaxWake, even where the waits alone would make it sleep sooner, but not
// when the waits average more than Max: a peer that computes between
// collectives keeps the receiver asleep for longer than any wake-up costs.
func (b *Budget) ObserveWake(d time.Duration) {
	if b.fixed != 0 {
		return
	}
	d = min(max(d, 1), MaxWake)
	if b.wake == 0 {
		b.wake = d
		return
	}
	b.wake += (d - b.wake) / 4
}

// ObserveSlept records a wait that may have slept: waited from its start
// until the receiver ran again with its message, and woke what waking from
// the sleep cost (ObserveWake), or < 0 when it did not sleep or cannot
// tell. The wait learned is waited without woke.
func (b *Budget) ObserveSlept(waited, woke time.Duration) {
	if woke >= 0 {
		b.ObserveWake(woke)
		waited -= woke
	}
	b.Observe(waited)
}

// Average is the moving average of the waits observed, for tests and
// reports.
func (b *Budget) Average() time.Duration { return b.avg }

// Wake is the moving average of what sleeps cost (ObserveWake), for tests
// and reports.
func (b *Budget) Wake() time.Duration { return b.wake }

// Peak is the longest recent wait up to Max, decayed by 1/16 at every wait
// since, for tests and reports.
func (b *Budget) Peak() time.Duration { return b.peak }
