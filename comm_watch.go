package collkit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/collkit/collkit/internal/release"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// WatchPeriod is how often a collective that is still running looks at
// the messages its peers sent and nobody reads yet (transport.Peeker). A
// peer that called a different collective with the same sequence number
// sends messages this rank's collective never takes: when one is found,
// the call fails at once with a *transport.MismatchError naming that peer,
// and its abort notice fails every other rank at the same call. Most
// mismatches show up in the first message a rank receives; this finds the
// rest (a tree all-reduce against another collective, say) within two
// periods rather than at the timeout.
//
// Where no such message was sent (each side waits to receive first), a
// collective still running after AskAfter asks every peer what it waits on
// (transport.Pinger, the stall report's probe), and again every
// 2*AskAfter: a peer waiting in another call with the same number is a
// mismatch too.
//
// Every NoticePeriod, the same timer looks for a peer's abort notice lying
// unread (transport.NoticePeeker): a rank that waits on a live neighbour
// learns that another rank gave up (or revoked the communicator) within
// milliseconds, instead of when the ranks between them have given up one
// after the other (each one a diagnosis and an abort: 130-170 ms to the
// last of 7 survivors on 2 cores, most of an elastic shrink's wait).
const (
	WatchPeriod  = 250 * time.Millisecond
	AskAfter     = time.Second
	NoticePeriod = 10 * time.Millisecond
)

// callWatch runs the check of WatchPeriod with one timer per communicator,
// armed while collectives run. A collective pays two atomic stores (and
// three more when it differs from the one before).
type callWatch struct {
	c     atomic.Pointer[Comm] // set with the timer, read on its goroutine
	timer atomic.Pointer[time.Timer]
	armed atomic.Bool
	// live is 1 + the sequence number of the collective in progress, 0
	// between collectives and while call is rewritten (a sequence lock).
	live atomic.Uint64
	// call is what identifies the collective in progress: Count;
	// Comm | Root<<32; Coll | DType<<8 | Op<<16.
	call [3]atomic.Uint64
	// last is call's value, kept by the callers (who hold c.mu) so that a
	// collective like the one before it stores only live.
	last [3]uint64
	// ts is the communicator's transports as the timer's goroutine sees
	// them: Split replaces c.t while the timer may be reading. The callers
	// store a copy when c.tGen says they changed (gen is c.tGen+1 at the
	// last copy, 0 before the first).
	ts  atomic.Pointer[watched]
	gen uint64
	// The timer's goroutine only: live at the last tick, and for how many
	// ticks in a row the same collective was seen.
	seen  uint64
	ticks int
}

// watched is a copy of a communicator's transports (Comm.t, Comm.intra).
type watched struct{ t, intra transport.Transport }

// begin records the collective h, which starts on the caller's goroutine
// (holding c.mu), and arms the timer if it is not.
func (w *callWatch) begin(c *Comm, h transport.Header) {
	if h.Coll == transport.CollNone || h.Coll == transport.CollSendRecv {
		return // point-to-point numbers its messages per peer
	}
	if w.gen != c.tGen+1 {
		w.ts.Store(&watched{c.t, c.intra})
		w.gen = c.tGen + 1
	}
	call := [3]uint64{h.Count, uint64(h.Comm) | uint64(uint32(h.Root))<<32, uint64(h.Coll) | uint64(h.DType)<<8 | uint64(h.Op)<<16}
	if call != w.last {
		w.live.Store(0)
		for i, v := range call {
			w.call[i].Store(v)
		}
		w.last = call
	}
	w.live.Store(h.Seq + 1)
	if w.armed.Load() || !w.armed.CompareAndSwap(false, true) {
		return
	}
	if t := w.timer.Load(); t != nil {
		t.Reset(NoticePeriod)
		return
	}
	w.c.Store(c)
	// Stored before it can fire: tick re-arms it through w.timer.
	t := time.AfterFunc(time.Hour, w.tick)
	w.timer.Store(t)
	t.Reset(NoticePeriod)
}

// end marks that no collective is in progress. A release store, not
// XCHG: nothing this goroutine loads next depends on the timer seeing it
// at once, and a timer that still sees the call live can only interrupt a
// context that the next call then replaces (interrupt, withTimeout).
func (w *callWatch) end() { release.Uint64(&w.live, 0) }

// tick runs on the timer's goroutine: it checks a collective seen running
// at the last tick too, and re-arms the timer while collectives run.
func (w *callWatch) tick() {
	live := w.live.Load()
	if live == 0 {
		w.armed.Store(false)
		// A collective that began after the Load found the timer armed.
		if w.live.Load() == 0 || !w.armed.CompareAndSwap(false, true) {
			return
		}
	} else if live == w.seen {
		w.ticks++
		w.notices(live)
		if w.ticks%ticksPerWatch == 0 {
			w.check(live, w.ticks/ticksPerWatch)
		}
	} else {
		w.ticks = 0
	}
	w.seen = live
	w.timer.Load().Reset(NoticePeriod)
}

const ticksPerWatch = int(WatchPeriod / NoticePeriod)

// notices interrupts the collective live with the first peer's abort
// notice that lies unread.
func (w *callWatch) notices(live uint64) {
	w.eachPeer(func(t transport.Transport, peer int) bool {
		np, ok := t.(transport.NoticePeeker)
		if !ok {
			return false
		}
		ae, ok := np.PeekNotice(peer)
		if ok {
			w.interrupt(live, ae)
		}
		return ok
	})
}

// eachPeer calls f with every peer of the communicator's transports (the
// intra-node one too) until f returns true.
func (w *callWatch) eachPeer(f func(t transport.Transport, peer int) bool) {
	ts := w.ts.Load()
	for _, t := range [...]transport.Transport{ts.t, ts.intra} {
		if t == nil {
			continue
		}
		for peer := range t.Size() {
			if peer != t.Rank() && f(t, peer) {
				return
			}
		}
	}
}

// check looks at what every peer sent and this rank has not read, and
// after AskAfter asks the peers what they wait on. A message or a wait of
// the same call number that belongs to another call interrupts the
// collective.
func (w *callWatch) check(live uint64, ticks int) {
	count, commRoot, kind := w.call[0].Load(), w.call[1].Load(), w.call[2].Load()
	if w.live.Load() != live {
		return // the collective ended while its header was read
	}
	want := transport.Header{
		Seq: live - 1, Count: count, Comm: uint32(commRoot), Root: int32(uint32(commRoot >> 32)),
		Coll: transport.Coll(kind), DType: reduce.DType(kind >> 8), Op: reduce.Op(kind >> 16),
	}
	found := false
	w.eachPeer(func(t transport.Transport, peer int) bool {
		pk, ok := t.(transport.Peeker)
		if !ok {
			return false
		}
		got, ok := pk.Peek(peer)
		if found = ok && !transport.SameCall(want, got); found {
			w.interrupt(live, mismatchOf(peer, want, got)) // only if live still runs
		}
		return found
	})
	if found {
		return
	}
	const every = int(AskAfter / WatchPeriod)
	if ticks >= every && ticks%(2*every) == every {
		if err := w.ask(want); err != nil {
			w.interrupt(live, err)
		}
	}
}

// interrupt fails the collective live, if it still runs, with err.
func (w *callWatch) interrupt(live uint64, err error) {
	if w.live.Load() != live {
		return
	}
	if cancel := w.c.Load().eng.cancel.Load(); cancel != nil {
		(*cancel)(err)
	}
}

func mismatchOf(peer int, want, got transport.Header) *transport.MismatchError {
	want.Algo, want.Step, want.Len = got.Algo, got.Step, got.Len // per message, not per call
	return &transport.MismatchError{Peer: peer, Want: want, Got: got}
}

// watchAsks counts the asks of every communicator: they allocate (a
// collective that has run past AskAfter allocates for them), and the
// allocation tests leave out the calls during which one ran.
var watchAsks atomic.Uint64

// ask pings every peer (at most maxPings at once, each for ProbeWindow) and
// returns a mismatch for the first found waiting in another call with
// want's number.
func (w *callWatch) ask(want transport.Header) error {
	t := w.ts.Load().t
	p, ok := t.(transport.Pinger)
	if !ok {
		return nil
	}
	watchAsks.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), ProbeWindow)
	defer cancel()
	found := make(chan error, t.Size())
	slots := make(chan struct{}, maxPings)
	for r := range t.Size() {
		if r == t.Rank() {
			continue
		}
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			ws, err := p.Ping(ctx, r)
			if err == nil {
				for _, wt := range ws {
					if !wt.Failed && !transport.SameCall(want, wt.Header) {
						found <- fmt.Errorf("rank %d is waiting in %s #%d, a different call with this call's number: %w",
							r, wt.Header.Coll, wt.Header.Seq, mismatchOf(r, want, wt.Header))
						return
					}
				}
			}
			found <- nil
		}()
	}
	var first error
	for range t.Size() - 1 {
		if err := <-found; err != nil && first == nil {
			first = err
		}
	}
	return first
}
