package collkit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/collkit/collkit/transport"
)

// FailureError is the error a collective returns when it fails on this rank
// (and that every later call wraps with ErrAborted). Besides the cause it
// carries what the transport could tell: the peers that died, and a stall
// report of the sends and receives this rank was waiting on.
type FailureError struct {
	Rank  int   // this rank
	Dead  []int // peers whose connections closed without an abort notice: their processes died
	Waits []transport.Wait
	Err   error // the cause

	// blocked is the peer operation the cause names, for the stall report
	// of a transport that records no waits (shared memory, say).
	blocked *transport.PeerError
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

// StallReport says what this rank was waiting on when it failed: which
// peers, in which operation and step, for how long.
func (e *FailureError) StallReport() string {
	if len(e.Waits) == 0 && e.blocked != nil {
		dir := map[bool]string{true: "send to", false: "recv from"}[e.blocked.Op == "send"]
		return fmt.Sprintf("stall report: rank %d was waiting on: %s rank %d when it failed", e.Rank, dir, e.blocked.Rank)
	}
	if len(e.Waits) == 0 {
		return ""
	}
	parts := make([]string, len(e.Waits))
	for i, w := range e.Waits {
		parts[i] = w.String()
	}
	return fmt.Sprintf("stall report: rank %d was waiting on: %s", e.Rank, strings.Join(parts, ", "))
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
	return fe
}

// abort tells the peers why this rank gives up, when the transport can, and
// closes it, so that no peer waits on this rank until its timeout.
func (c *Comm) abort(fe *FailureError) {
	reason := fe.Err.Error()
	var ae *transport.AbortError
	if errors.As(fe.Err, &ae) {
		// Pass the first cause on near the front, where truncation
		// cannot cut it.
		reason = fmt.Sprintf("rank %d gave up because rank %d aborted: %s", c.Rank(), ae.Rank, ae.Reason)
	}
	if len(fe.Dead) > 0 {
		reason = fmt.Sprintf("%s died (its connection to rank %d closed without an abort notice); rank %d's own error: %s",
			ranks(fe.Dead), c.Rank(), c.Rank(), reason)
	}
	for _, t := range []transport.Transport{c.t, c.intra} { // c.intra: shared memory inside the node
		if a, ok := t.(transport.Aborter); ok {
			a.Abort(reason)
		} else if t != nil {
			t.Close()
		}
	}
}
