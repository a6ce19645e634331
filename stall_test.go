package collkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// stuckPhrase is how an error names rank r as the one holding the job up:
// not responding at all, or alive but in no send or receive.
func stuckPhrase(r int, answered bool) string {
	if answered {
		return fmt.Sprintf("rank %d is alive but in no send or receive", r)
	}
	return fmt.Sprintf("rank %d is not responding", r)
}

// A rank that stops taking part in a ring all-reduce of four, either
// stopped (it answers nothing, as under SIGSTOP) or just absent (it never
// calls the collective, but its transport answers), is named as the stuck
// rank in every other rank's error, within the timeout and twice the probe
// window, and no live rank is named.
func TestStuckRankNamed(t *testing.T) {
	const n, timeout = 4, 300 * time.Millisecond
	memComms := func(t *testing.T, opts Options, stop int) []*Comm {
		net := mem.NewNetwork(n, mem.Config{})
		t.Cleanup(func() { net.Close() })
		if stop >= 0 {
			net.Stop(stop)
		}
		cs := make([]*Comm, n)
		for r, tr := range net.Transports() {
			c, err := New(tr, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			cs[r] = c
		}
		return cs
	}
	stopped := func(t *testing.T, opts Options, stuck int) []*Comm { return memComms(t, opts, stuck) }
	absentMem := func(t *testing.T, opts Options, _ int) []*Comm { return memComms(t, opts, -1) }
	absentTCP := func(t *testing.T, opts Options, _ int) []*Comm { return tcpComms(t, n, opts) }
	absentShm := func(t *testing.T, opts Options, _ int) []*Comm { return shmComms(t, n, opts) }
	for _, tc := range []struct {
		name     string
		algo     string
		stuck    int
		answered bool // the stuck rank's transport answers probes
		comms    func(t *testing.T, opts Options, stuck int) []*Comm
	}{
		{"mem/stopped", "ring", 2, false, stopped},
		{"mem/stopped", "ring", 0, false, stopped},
		// Rank 1 waits on the stopped rank 3 and on rank 2, which waits on
		// rank 0: every probe must get the whole window, not only the
		// first ones.
		{"mem/stopped", "tree", 3, false, stopped},
		{"mem/stopped", "halvingdoubling", 1, false, stopped},
		{"mem/absent", "ring", 2, true, absentMem},
		{"tcp/absent", "ring", 2, true, absentTCP},
		{"tcp/absent", "ring", 0, true, absentTCP},
		{"tcp/absent", "tree", 3, true, absentTCP},
		// Shared memory reads what the ranks' waits published.
		{"shm/absent", "ring", 1, true, absentShm},
		{"shm/absent", "tree", 3, true, absentShm},
	} {
		t.Run(fmt.Sprintf("%s/%s/%d", tc.name, tc.algo, tc.stuck), func(t *testing.T) {
			// Mostly waiting, for the timeout and then the probe window.
			t.Parallel()
			cs := tc.comms(t, Options{Algorithm: tc.algo, Timeout: timeout}, tc.stuck)
			start := time.Now()
			took := make([]time.Duration, n)
			errs := onEvery(cs, func(r int, c *Comm) error {
				if r == tc.stuck {
					return nil // takes no part
				}
				x := make([]float32, 1000)
				err := AllReduce(context.Background(), c, x, x, Sum)
				took[r] = time.Since(start)
				return err
			})
			for r, err := range errs {
				if r == tc.stuck {
					continue
				}
				if err == nil {
					t.Fatalf("rank %d: no error though rank %d took no part", r, tc.stuck)
				}
				checkNamesStuck(t, r, err, tc.stuck, tc.answered)
				t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
				// Twice the window: a rank told by a peer's notice probes in turn.
				if limit := timeout + 2*ProbeWindow + 2*time.Second; took[r] > limit {
					t.Errorf("rank %d failed after %v; the timeout is %v and the probe window %v", r, took[r], timeout, ProbeWindow)
				}
			}
		})
	}
}

// checkNamesStuck checks that rank r's error err names rank stuck as stuck
// (answered: as alive but idle; else as not responding), in its own
// findings or in a peer's abort notice it quotes, and names no other rank
// so.
func checkNamesStuck(t *testing.T, r int, err error, stuck int, answered bool) {
	t.Helper()
	var fe *FailureError
	if !errors.As(err, &fe) {
		t.Fatalf("rank %d: %v is not a *FailureError", r, err)
	}
	own := false
	for _, s := range fe.Stuck {
		if s.Rank != stuck || s.Answered != answered {
			t.Errorf("rank %d names %+v as stuck; only rank %d is (answered %v): %v", r, s, stuck, answered, err)
		}
		own = own || s.Rank == stuck
	}
	var ae *transport.AbortError
	quoted := errors.As(err, &ae) && strings.Contains(ae.Reason, stuckPhrase(stuck, answered))
	// A stopped rank answers no one, so every rank finds it itself; an
	// idle one is named only after a rank's own timeout, and the others
	// quote that rank's notice.
	if !own && (!answered || !quoted) {
		t.Errorf("rank %d does not name rank %d as stuck (own findings %v, quoted %v): %v", r, stuck, fe.Stuck, quoted, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "stall report: "+stuckPhrase(stuck, answered)) && !quoted {
		t.Errorf("rank %d: the stall report does not start with rank %d: %v", r, stuck, msg)
	}
	for x := range 4 {
		for _, a := range []bool{false, true} {
			if (x != stuck || a != answered) && strings.Contains(msg, stuckPhrase(x, a)) {
				t.Errorf("rank %d: the error says %q, but rank %d is the stuck one: %v", r, stuckPhrase(x, a), stuck, msg)
			}
		}
	}
}

// fakePinger answers probes from a table: which ranks each rank waits on,
// which answer nothing (until the probe's context ends) and which are gone.
type fakePinger struct {
	waits  map[int][]int
	silent map[int]bool
	gone   map[int]bool
}

func (f fakePinger) Ping(ctx context.Context, peer int) ([]transport.Wait, error) {
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case f.silent[peer]:
		<-ctx.Done()
		return nil, fmt.Errorf("%w (%w)", transport.ErrNoAnswer, ctx.Err())
	case f.gone[peer]:
		return nil, transport.ErrPeerGone
	}
	var ws []transport.Wait
	for _, r := range f.waits[peer] {
		ws = append(ws, transport.Wait{Peer: r, Op: "recv"})
	}
	return ws, nil
}

// findStuck names the ranks that do not answer, every one of which had the
// whole window (under synctest the window passes as soon as every probe
// waits), with the chain of waits that leads to each; else, when allowed,
// the ranks that answer but wait on no one; and never a rank that answered.
func TestFindStuck(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  []int // what rank 1, the prober, waits on
		fake fakePinger
		idle bool
		want []Stuck
	}{
		{"silent beside a live chain", []int{2, 3}, fakePinger{waits: map[int][]int{0: {3}, 2: {0}}, silent: map[int]bool{3: true}}, true,
			[]Stuck{{Rank: 3, Chain: []int{1, 3}}}},
		{"silent at the end of a chain", []int{0}, fakePinger{waits: map[int][]int{0: {3}, 3: {2}}, silent: map[int]bool{2: true}}, true,
			[]Stuck{{Rank: 2, Chain: []int{1, 0, 3, 2}}}},
		{"silent and idle: only the silent", []int{0}, fakePinger{waits: map[int][]int{0: {2}}, silent: map[int]bool{3: true}}, true,
			[]Stuck{{Rank: 3}}},
		{"idle past a rank that is gone", []int{0}, fakePinger{waits: map[int][]int{3: {2}}, gone: map[int]bool{0: true}}, true,
			[]Stuck{{Rank: 2, Answered: true, Chain: []int{3, 2}}}},
		{"idle not allowed", []int{2}, fakePinger{}, false, nil},
		{"a cycle names no one", []int{0}, fakePinger{waits: map[int][]int{0: {3}, 3: {2}, 2: {1}}}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				got := findStuck(tc.fake, 1, 4, tc.own, tc.idle, slog.New(slog.DiscardHandler))
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("findStuck = %+v, want %+v", got, tc.want)
				}
				want := time.Duration(0)
				if len(tc.fake.silent) > 0 {
					want = ProbeWindow
				}
				if took := time.Since(start); took != want {
					t.Errorf("took %v, want %v", took, want)
				}
			})
		})
	}
}
