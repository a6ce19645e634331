package collkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
)

// ProbeWindow bounds how long a failing rank waits for its peers to answer
// the liveness probes that find a stuck rank (transport.Pinger). A live
// process answers within milliseconds even while its collective is blocked
// (4 ranks on 2 loaded cores: 8 ms median, 84 ms the slowest of 30), one
// that is stopped or hung never does; with a window of 1 s one live rank
// in 160 probes once went unanswered, so it is 2 s. A stall report comes
// this much after the communicator's timeout, twice that on a rank that
// was told of the failure by a peer's abort notice and probes in turn.
const ProbeWindow = 2 * time.Second

// FailureError is the error a collective returns when it fails on this rank
// (and that every later call wraps with ErrAborted). Besides the cause it
// carries what the transport could tell: the peers that died, the ranks
// that hold the job up, and a stall report of the sends and receives this
// rank was waiting on.
type FailureError struct {
	Rank  int   // this rank
	Dead  []int // peers whose connections closed without an abort notice: their processes died
	Stuck []Stuck
	Waits []transport.Wait
	Err   error // the cause

	// blocked is the peer operation the cause names, for the stall report
	// of a transport that records no waits (shared memory, say).
	blocked *transport.PeerError
	// probed: the peers were asked who is stuck (Stuck may still be empty).
	probed bool
}

// Stuck is a rank found holding the job up. When a collective times out, or
// a peer aborts, and no peer died, the failing rank asks every other rank
// what it waits on (transport.Pinger), giving each ProbeWindow to answer,
// and follows the chain of waits in the answers.
type Stuck struct {
	Rank int
	// Answered is false when the rank's process did not answer a liveness
	// probe within ProbeWindow: it is stopped (SIGSTOP), hung, or cut off.
	// Only such ranks are named when there are any. Otherwise Answered
	// ranks are named: they answered but were in no send or receive, so they
	// have not called the collective (or are busy outside collkit); these
	// are named only after this rank's own timeout, and only where the
	// transport sees every message of a collective (no intra-node
	// transport beside it).
	Answered bool
	// Chain is who waited on whom, from the rank it starts at (this rank,
	// when the waits lead from here) to Rank, as the answers said; nil when
	// no rank was found waiting on it.
	Chain []int
	// Why is what the probe found instead of an answer, where the
	// transport can tell (shared memory: "its process (pid 42) is stopped:
	// state T"); empty when the rank answered, or just did not.
	Why string
}

func (s Stuck) String() string {
	var b strings.Builder
	if s.Answered {
		fmt.Fprintf(&b, "rank %d is alive but in no send or receive (it answered a liveness probe): "+
			"it has not called the collective, or is busy outside collkit", s.Rank)
	} else if s.Why != "" {
		fmt.Fprintf(&b, "rank %d is not responding (%s)", s.Rank, s.Why)
	} else {
		fmt.Fprintf(&b, "rank %d is not responding (stopped, hung or cut off: it did not answer a liveness probe within %v)", s.Rank, ProbeWindow)
	}
	for i, r := range s.Chain[:max(len(s.Chain)-1, 0)] {
		switch {
		case i == 0:
			fmt.Fprintf(&b, "; rank %d was waiting on ", r)
		default:
			fmt.Fprintf(&b, "rank %d, which was waiting on ", r)
		}
	}
	if len(s.Chain) > 1 {
		b.WriteString("it")
	}
	if !s.Answered {
		b.WriteString("; look at that process: ps shows state T if it was stopped, and SIGQUIT dumps its goroutines if it hangs")
	}
	return b.String()
}

func (e *FailureError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if len(e.Dead) > 0 {
		fmt.Fprintf(&b, "; dead: %s (connection closed without an abort notice: the process exited or was killed)", ranks(e.Dead))
	}
	if r := e.StallReport(); r != "" {
		b.WriteString("; ")
		b.WriteString(r)
	}
	return b.String()
}

func (e *FailureError) Unwrap() error { return e.Err }

// StallReport names the ranks found stuck (see Stuck), and says what this
// rank was waiting on when it failed: which peers, in which operation and
// step, for how long.
func (e *FailureError) StallReport() string {
	var parts []string
	for _, s := range e.Stuck {
		parts = append(parts, s.String())
	}
	if e.probed && len(e.Stuck) == 0 {
		parts = append(parts, fmt.Sprintf("no rank found stuck: every peer asked answered a liveness probe within %v "+
			"or had closed its transport", ProbeWindow))
	}
	switch {
	case len(e.Waits) == 0 && e.blocked != nil:
		dir := map[bool]string{true: "send to", false: "recv from"}[e.blocked.Op == "send"]
		parts = append(parts, fmt.Sprintf("rank %d was waiting on: %s rank %d when it failed", e.Rank, dir, e.blocked.Rank))
	case len(e.Waits) > 0:
		ws := make([]string, len(e.Waits))
		for i, w := range e.Waits {
			ws[i] = w.String()
		}
		parts = append(parts, fmt.Sprintf("rank %d was waiting on: %s", e.Rank, strings.Join(ws, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "stall report: " + strings.Join(parts, "; ")
}

func ranks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprintf("rank %d", r)
	}
	return strings.Join(s, ", ")
}

// diagnose wraps the error that ends the communicator with what the
// transport knows about dead peers and stalled operations. It must run
// before the transport is closed.
func (c *Comm) diagnose(err error) *FailureError {
	fe := &FailureError{Rank: c.Rank(), Err: err}
	if p, ok := c.t.(transport.Prober); ok {
		fe.Dead = p.Dead()
	}
	if w, ok := c.t.(transport.WaitReporter); ok {
		fe.Waits = w.Waits()
	}
	if pe := (*transport.PeerError)(nil); len(fe.Waits) == 0 && errors.As(err, &pe) && (pe.Op == "send" || pe.Op == "recv") {
		fe.blocked = pe
	}
	timedOut := errors.Is(err, context.DeadlineExceeded)
	var ae *transport.AbortError
	// A peer's notice that says a rank died already names the cause: no
	// rank is stuck, and probing would only delay this rank's own notice
	// (and an elastic job's shrink) by the probes' round trips.
	dead := errors.As(err, &ae) && strings.Contains(ae.Reason, deathMark)
	if p, ok := c.t.(transport.Pinger); ok && len(fe.Dead) == 0 && (timedOut || errors.As(err, &ae)) && !dead && !errors.Is(err, ErrRevoked) {
		var own []int
		if fe.blocked != nil && c.intra == nil { // an intra-node transport numbers its ranks its own way
			own = []int{fe.blocked.Rank}
		}
		start := time.Now()
		fe.Stuck = findStuck(p, c.Rank(), c.Size(), append(peersOf(fe.Waits), own...), timedOut && c.intra == nil, c.obs.log)
		fe.probed = true
		c.obs.log.Info("stall search", "report", fe.StallReport(), "took", time.Since(start))
	}
	return fe
}

// deathMark is in the abort notice of a rank that saw a peer die.
const deathMark = " died (its connection to rank "

// maxPings bounds the liveness probes one rank has in flight.
const maxPings = 256

// findStuck finds the ranks that hold the job up. It asks every other rank
// at once what it waits on (transport.Pinger), giving each probe all of
// ProbeWindow; a probe that cannot start within ProbeWindow (more than
// maxPings ranks are slow) is not made. It returns the ranks that did not
// answer; without those, and when idle is set, the ranks that answered but
// wait on no one. The chains of waits, from this rank's own (waitsOn), come
// from the answers.
//
// Every probe gets the whole window, rather than following the chain of
// waits one probe after another: a probe started late, with less time
// left, could take a live rank for a stuck one.
func findStuck(p transport.Pinger, self, size int, waitsOn []int, idle bool, log *slog.Logger) []Stuck {
	start := time.Now()
	type answer struct {
		rank  int
		waits []transport.Wait
		err   error
		asked bool
	}
	answers := make(chan answer, size)
	slots := make(chan struct{}, maxPings)
	for r := range size {
		if r == self {
			continue
		}
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if time.Since(start) > ProbeWindow {
				answers <- answer{rank: r}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), ProbeWindow)
			defer cancel()
			t0 := time.Now()
			ws, err := p.Ping(ctx, r)
			log.Info("ping", "peer", r, "took", time.Since(t0), "waits", len(ws), "err", err)
			answers <- answer{r, ws, err, true}
		}()
	}
	edges := map[int][]int{self: dedup(waitsOn)} // rank -> the peers it waits on, for each that answered
	silent, answered := map[int]bool{}, map[int]bool{}
	why := map[int]string{}
	for range size - 1 {
		var na *transport.NoAnswerError
		switch a := <-answers; {
		case !a.asked:
		case errors.Is(a.err, transport.ErrNoAnswer):
			silent[a.rank] = true
			if errors.As(a.err, &na) {
				why[a.rank] = na.Why
			}
		case a.err != nil:
			// Gone: it gave up and closed its transport, or exited; not
			// stuck either way.
		default:
			answered[a.rank] = true
			edges[a.rank] = dedup(peersOf(a.waits))
		}
	}

	var found []Stuck
	for r := range size {
		switch {
		case silent[r]:
			found = append(found, Stuck{Rank: r, Why: why[r]})
		case len(silent) == 0 && idle && answered[r] && len(edges[r]) == 0:
			found = append(found, Stuck{Rank: r, Answered: true})
		}
	}
	for i := range found {
		found[i].Chain = chainTo(edges, self, found[i].Rank)
	}
	return found
}

// chainTo is the shortest chain of waits in edges from self to target, or
// else from the lowest rank that waits on target; nil when none does.
func chainTo(edges map[int][]int, self, target int) []int {
	prev := map[int]int{self: self}
	for queue := []int{self}; len(queue) > 0; queue = queue[1:] {
		r := queue[0]
		if r == target {
			chain := []int{r}
			for r != self {
				r = prev[r]
				chain = append(chain, r)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range edges[r] {
			if _, seen := prev[next]; !seen {
				prev[next] = r
				queue = append(queue, next)
			}
		}
	}
	for _, r := range slices.Sorted(maps.Keys(edges)) {
		if slices.Contains(edges[r], target) {
			return []int{r, target}
		}
	}
	return nil
}

// peersOf lists the peers of waits.
func peersOf(waits []transport.Wait) []int {
	peers := make([]int, 0, len(waits))
	for _, w := range waits {
		peers = append(peers, w.Peer)
	}
	return peers
}

func dedup(rs []int) []int {
	rs = slices.Clone(rs)
	slices.Sort(rs)
	return slices.Compact(rs)
}

// abort tells the peers why this rank gives up, when the transport can, and
// closes it, so that no peer waits on this rank until its timeout.
func (c *Comm) abort(fe *FailureError) {
	reason := fe.Err.Error()
	var ae *transport.AbortError
	if rv := revocation(fe.Err); rv != nil {
		reason = rv.Error() // word for word, so that every rank sees the revocation
	} else if errors.As(fe.Err, &ae) {
		// Pass the first cause on near the front, where truncation
		// cannot cut it.
		reason = fmt.Sprintf("rank %d gave up because rank %d aborted: %s", c.Rank(), ae.Rank, ae.Reason)
	}
	if len(fe.Dead) > 0 {
		reason = fmt.Sprintf("%s"+deathMark+"%d closed without an abort notice); rank %d's own error: %s",
			ranks(fe.Dead), c.Rank(), c.Rank(), reason)
	}
	if len(fe.Stuck) > 0 {
		stuck := make([]string, len(fe.Stuck))
		for i, s := range fe.Stuck {
			stuck[i] = s.String()
		}
		reason = fmt.Sprintf("%s; rank %d's own error: %s", strings.Join(stuck, "; "), c.Rank(), reason)
	}
	for _, t := range []transport.Transport{c.t, c.intra} { // c.intra: shared memory inside the node
		switch t := t.(type) {
		case nil:
		case *nccl.Transport:
			t.Fail(reason) // kept for Shrink where NCCL can shrink it (comm_elastic_nccl.go), else closed
		case transport.Aborter:
			t.Abort(reason)
		default:
			t.Close()
		}
	}
}
