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
	return min(max(2*b.peak, First), Max)
}

// Observe records how long a wait took, from its start to the message's
// arrival, whether it polled or slept.
func (b *Budget) Observe(waited time.Duration) {
	if b.fixed != 0 {
		return
	}
	waited = min(max(waited, 1), outlier)
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

// Average is the moving average of the waits observed, for tests and
// reports.
func (b *Budget) Average() time.Duration { return b.avg }

// Peak is the longest recent wait up to Max, decayed by 1/16 at every wait
// since, for tests and reports.
func (b *Budget) Peak() time.Duration { return b.peak }
