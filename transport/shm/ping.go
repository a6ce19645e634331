//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/collkit/collkit/transport"
)

// A wait that goes to sleep (await's last phase) publishes what it waits
// for in one of waitSlots records of its rank's segment, so that a peer's
// stall report can ask (Ping) without this process taking part: a stopped
// process cannot answer, but its records and its state in /proc still
// tell. A wait that ends while polling publishes nothing and costs
// nothing. A record (waitBytes at offWaits + i*waitBytes):
//
//	+0   generation: odd while the owner rewrites the record
//	+4   op: 0 free, else opSend, opRecv or opBarrier, with opFailed
//	     added once the wait ended in an error
//	+8   peer rank waited on
//	+16  since: when the wait began to sleep (Unix ns)
//	+24  beat: when the waiter last ran (Unix ns); it wakes at least
//	     every sleepSlice
//	+32  the operation's header (transport.HeaderSize bytes)
const (
	waitSlots = 8
	waitBytes = 128

	opSend    = 1
	opRecv    = 2
	opBarrier = 3
	opFailed  = 1 << 8

	waitGen    = 0
	waitOp     = 4
	waitPeer   = 8
	waitSince  = 16
	waitBeat   = 24
	waitHeader = 32
)

// opNames are the ops as transport.Wait names them.
var opNames = [...]string{opSend: "send", opRecv: "recv", opBarrier: "barrier"}

// staleBeat is how long a sleeping waiter may go without running before
// Ping takes its process for stopped or hung: 20 times the longest sleep.
const staleBeat = 20 * sleepSlice

// note is what a wait is for: filled by the caller of await, published
// only if the wait goes to sleep. peer may change while it waits (the
// native all-reduce's barrier waits on whichever rank is late).
type note struct {
	op   uint32
	peer int
	h    *transport.Header // the operation's header
}

// publish writes n into a free record of this rank's segment, or else
// over one of a wait that failed, and returns its index; -1 when every
// record is a wait in progress.
func (t *Transport) publish(n *note) int {
	i := t.claim()
	if i < 0 {
		return -1
	}
	s, off := t.segs[t.cfg.Rank], offWaits+i*waitBytes
	s.u32(off + waitGen).Add(1)
	s.u32(off + waitOp).Store(n.op)
	s.u32(off + waitPeer).Store(uint32(n.peer))
	now := uint64(time.Now().UnixNano())
	s.u64(off + waitSince).Store(now)
	s.u64(off + waitBeat).Store(now)
	var hb [transport.HeaderSize]byte
	if n.h != nil {
		n.h.Encode(hb[:])
	}
	for j := 0; j < transport.HeaderSize; j += 8 {
		s.u64(off + waitHeader + j).Store(binary.LittleEndian.Uint64(hb[j:]))
	}
	s.u32(off + waitGen).Add(1)
	return i
}

// beat records that the waiter of record i runs, and on whom it waits now.
func (t *Transport) beat(i int, n *note) {
	s, off := t.segs[t.cfg.Rank], offWaits+i*waitBytes
	s.u32(off + waitPeer).Store(uint32(n.peer))
	s.u64(off + waitBeat).Store(uint64(time.Now().UnixNano()))
}

// claim takes a free record, or else one of a failed wait.
func (t *Transport) claim() int {
	for {
		used := t.waitUsed.Load()
		if i := bits.TrailingZeros32(^used); i < waitSlots {
			if t.waitUsed.CompareAndSwap(used, used|1<<i) {
				return i
			}
			continue
		}
		failed := t.waitFailed.Load()
		if failed == 0 {
			return -1
		}
		i := bits.TrailingZeros32(failed)
		if t.waitFailed.CompareAndSwap(failed, failed&^(1<<i)) {
			return i
		}
	}
}

// unpublish ends record i's wait: it frees the record, or keeps it marked
// failed when the wait ended in an error (Ping reports those too, as
// transport.WaitReporter asks, until the record is needed again).
func (t *Transport) unpublish(i int, failed bool) {
	s, off := t.segs[t.cfg.Rank], offWaits+i*waitBytes
	if failed {
		s.u32(off + waitOp).Or(opFailed)
		t.waitFailed.Or(1 << i)
		return
	}
	s.u32(off + waitGen).Add(1)
	s.u32(off + waitOp).Store(0)
	s.u32(off + waitGen).Add(1)
	t.waitUsed.And(^uint32(1 << i))
}

// sleepingWaits reads the published records of segment s as of now, and
// the oldest beat of those in progress (zero when there are none).
func (s *segment) sleepingWaits(now time.Time) (waits []transport.Wait, oldest time.Time) {
	for i := range waitSlots {
		off := offWaits + i*waitBytes
		for range 100 { // the owner rewrites a record in nanoseconds
			gen := s.u32(off + waitGen).Load()
			if gen&1 != 0 {
				continue
			}
			op := s.u32(off + waitOp).Load()
			peer := int(int32(s.u32(off + waitPeer).Load()))
			since := time.Unix(0, int64(s.u64(off+waitSince).Load()))
			beat := time.Unix(0, int64(s.u64(off+waitBeat).Load()))
			var hb [transport.HeaderSize]byte
			for j := 0; j < transport.HeaderSize; j += 8 {
				binary.LittleEndian.PutUint64(hb[j:], s.u64(off+waitHeader+j).Load())
			}
			if s.u32(off+waitGen).Load() != gen {
				continue
			}
			failed := op&opFailed != 0
			if op &^= opFailed; op == 0 || op >= uint32(len(opNames)) {
				break
			}
			h, _ := transport.Decode(hb[:]) // a barrier's is empty
			waited := now.Sub(since)
			if failed {
				waited = beat.Sub(since)
			}
			waits = append(waits, transport.Wait{Peer: peer, Op: opNames[op], Header: h, Since: since, Waited: waited, Failed: failed})
			if !failed && (oldest.IsZero() || beat.Before(oldest)) {
				oldest = beat
			}
			break
		}
	}
	return waits, oldest
}

var _ transport.Pinger = (*Transport)(nil)

// Ping tells whether peer's process runs and what it waits on
// (transport.Pinger) without its taking part: from its state in /proc
// (stopped: state T or t) where its pid is visible from here, and from the
// waits it published, whose beat stops when the process does.
func (t *Transport) Ping(ctx context.Context, peer int) ([]transport.Wait, error) {
	perr := func(err error) error { return &transport.PeerError{Rank: peer, Op: "ping", Err: err} }
	if err := ctx.Err(); err != nil {
		return nil, perr(err)
	}
	switch {
	case peer < 0 || peer >= t.cfg.Size || peer == t.cfg.Rank:
		return nil, perr(fmt.Errorf("%w: rank %d is this rank or outside a job of %d ranks", transport.ErrBadPeer, peer, t.cfg.Size))
	case !t.connected.Load():
		return nil, perr(ErrNotConnected)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed.Load() {
		return nil, perr(transport.ErrClosed)
	}
	pr := t.peers[peer]
	if err := pr.gone(true); err != nil {
		return nil, &transport.PeerError{Rank: peer, Addr: pr.addr(), Op: "ping", Err: err}
	}
	noAnswer := func(why string) error {
		return &transport.PeerError{Rank: peer, Addr: pr.addr(), Op: "ping", Err: &transport.NoAnswerError{Why: why}}
	}
	if pr.checkPid {
		if st := procState(pr.pid); st == 'T' || st == 't' {
			return nil, noAnswer(fmt.Sprintf("its process (pid %d) is stopped: state %c", pr.pid, st))
		}
	}
	now := time.Now()
	waits, beat := pr.seg.sleepingWaits(now)
	if !beat.IsZero() && now.Sub(beat) > staleBeat {
		return nil, noAnswer(fmt.Sprintf("its process (pid %d) has not run for %v while it waits: stopped or hung",
			pr.pid, now.Sub(beat).Round(time.Millisecond)))
	}
	return waits, nil
}

// procState is the state letter of process pid in /proc (R, S, D, T, t,
// Z, ...), or 0 when it cannot be read.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 0
}
