package collkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
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
	opts := Options{Algorithm: "ring", Timeout: timeout}
	memComms := func(t *testing.T, stop int) []*Comm {
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
	for _, tc := range []struct {
		name     string
		stuck    int
		answered bool // the stuck rank's transport answers probes
		comms    func(t *testing.T, stuck int) []*Comm
	}{
		{"mem/stopped/2", 2, false, memComms},
		{"mem/stopped/0", 0, false, memComms},
		{"mem/absent/2", 2, true, func(t *testing.T, _ int) []*Comm { return memComms(t, -1) }},
		{"tcp/absent/2", 2, true, func(t *testing.T, _ int) []*Comm { return tcpComms(t, n, opts) }},
		{"tcp/absent/0", 0, true, func(t *testing.T, _ int) []*Comm { return tcpComms(t, n, opts) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := tc.comms(t, tc.stuck)
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
