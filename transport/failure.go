package transport

import (
	"context"
	"fmt"
	"time"
)

// CollAbort marks an abort notice: a message a rank sends every peer when it
// gives up on the job, whose payload says why. A receiver that finds one
// where it expected a message returns an *AbortError instead of waiting.
const CollAbort Coll = 0xff

// MaxAbortReason bounds the reason an abort notice carries, in bytes.
const MaxAbortReason = 1024

// AbortError is returned by Recv when the peer sent an abort notice: it
// gave up on the job (an error of its own, or a peer it saw die) and says
// why. It matches ErrPeerGone.
type AbortError struct {
	Rank   int    // the rank that aborted
	Reason string // what it said
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("rank %d aborted: %s", e.Rank, e.Reason)
}

// Is makes errors.Is(err, ErrPeerGone) true.
func (e *AbortError) Is(target error) bool { return target == ErrPeerGone }

// Aborter is implemented by transports that can tell every peer why this
// rank gives up. Abort sends each reachable peer an abort notice carrying
// reason (truncated to MaxAbortReason bytes), without blocking for long on
// any, and then closes the transport. It must not run concurrently with Send.
type Aborter interface {
	Abort(reason string) error
}

// Prober is implemented by transports that can tell, without blocking,
// which peers have died: their connections were closed by the other side
// without an abort notice, as when a process exits or is killed. Call it
// before Close or Abort.
type Prober interface {
	Dead() []int
}

// Wait is one operation a rank was waiting on: a Send or Recv in progress,
// or one that ended in an error.
type Wait struct {
	Peer   int
	Op     string // "send" or "recv"; "barrier" for shared memory's native all-reduce
	Header Header // what the operation was (Seq, Coll, Step, Len, ...)
	Since  time.Time
	Waited time.Duration // from Since to the report
	Failed bool          // it ended in an error rather than being still in progress
}

func (w Wait) String() string {
	state := "in progress"
	if w.Failed {
		state = "failed"
	}
	dir := "recv from"
	switch w.Op {
	case "send":
		dir = "send to"
	case "barrier":
		return fmt.Sprintf("barrier of the native all-reduce, waiting on rank %d (%s after %v)", w.Peer, state, w.Waited.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s rank %d (%s #%d step %d, %d bytes, %s after %v)", dir, w.Peer, w.Header.Coll,
		w.Header.Seq, w.Header.Step, w.Header.Len, state, w.Waited.Round(time.Millisecond))
}

// WaitReporter is implemented by transports that record, cheaply, what each
// Send and Recv is waiting on, for stall reports. Waits lists the
// operations in progress and those that ended in an error since, oldest
// first.
type WaitReporter interface {
	Waits() []Wait
}

// Pinger is implemented by transports that can ask a peer's process (not
// just its kernel, which keeps answering TCP for a stopped process) whether
// it is alive, and what it is waiting on, while the peer's own collective is
// blocked. Ping returns the peer's Waits (see WaitReporter; empty when it is
// in no Send or Recv), an error wrapping ErrNoAnswer when the peer did not
// answer before ctx ended, or another error when it is gone: its process
// exited or its transport was closed. A ctx that has ended before Ping
// begins says nothing about the peer: Ping then returns ctx's error.
//
// Stall reports use it to find the rank that holds the job up. Ping is safe
// to call concurrently with Send, Recv and other Pings, but not after Close.
type Pinger interface {
	Ping(ctx context.Context, peer int) ([]Wait, error)
}

// Peeker is implemented by transports that can show, without consuming it
// and without blocking, the header of the next message from peer when it
// has arrived and no Recv is reading from that peer. A communicator whose
// call waits uses it to find a peer that called another collective: that
// peer's message lies unread while this rank waits on someone else (see
// SameCall).
type Peeker interface {
	Peek(peer int) (Header, bool)
}

// NoticePeeker is implemented by transports that can tell, without
// blocking, that a peer's abort notice (see Aborter) lies unread on a
// connection no Recv is reading. A communicator whose call waits on
// someone else looks every few milliseconds, so that a failure or a revoke
// reaches every rank at once rather than hop by hop, as each rank in turn
// gives up and its neighbour reads its notice.
type NoticePeeker interface {
	PeekNotice(peer int) (*AbortError, bool)
}

// SameCall reports whether a message with header got, from a peer, can
// belong to the collective call this rank runs as want: when both are
// collective calls of one communicator with the same sequence number, they
// must agree on the collective, count, data type, op and root. Algorithms
// set Step, Len and Algo per message, and point-to-point messages and
// other communicators' number their calls apart, so those never disagree;
// nor does a header that names no collective (a wait's, where the transport
// could not tell which call it belongs to).
func SameCall(want, got Header) bool {
	if got.Seq != want.Seq || got.Comm != want.Comm || got.Coll == CollSendRecv || want.Coll == CollSendRecv ||
		got.Coll == CollAbort || want.Coll == 0 || got.Coll == 0 {
		return true
	}
	return got.Coll == want.Coll && got.Count == want.Count && got.DType == want.DType && got.Op == want.Op && got.Root == want.Root
}
