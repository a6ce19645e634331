//go:build linux

package shm

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// procState reads a process's state letter: a sleeping child is S (or R),
// the same child stopped is T, a pid that does not exist has none.
func TestProcState(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if st := procState(pid); st != 'S' && st != 'R' {
		t.Fatalf("a sleeping child: state %q, want S or R", st)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for procState(pid) != 'T' {
		if time.Now().After(deadline) {
			t.Fatalf("a stopped child: state %q after 5s, want T", procState(pid))
		}
		time.Sleep(time.Millisecond)
	}
	if st := procState(1 << 30); st != 0 {
		t.Fatalf("a pid that does not exist: state %q, want none", st)
	}
}

// Ping reads a peer's published waits: one in progress is reported with
// its header; once its beat is older than staleBeat the peer is taken for
// stopped or hung (transport.NoAnswerError); a failed wait is reported as
// failed and does not make the peer stale; every record can be reused once
// its wait failed.
func TestPingReadsPublishedWaits(t *testing.T) {
	ts, err := Local(context.Background(), 2, Config{})
	if err != nil {
		t.Skip(err)
	}
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	h := transport.Header{Seq: 7, Coll: transport.CollAllReduce, DType: reduce.Float32, Count: 2, Step: 1, Len: 8}
	i := ts[1].publish(&note{op: opRecv, peer: 0, h: &h})
	if i < 0 {
		t.Fatal("no record free on a fresh transport")
	}
	ws, err := ts[0].Ping(context.Background(), 1)
	if err != nil || len(ws) != 1 || ws[0].Peer != 0 || ws[0].Op != "recv" || ws[0].Failed || ws[0].Header != h {
		t.Fatalf("Ping(1) = %v, %v; want rank 1's recv from rank 0 in progress, header %v", ws, err, h)
	}

	s, off := ts[1].segs[1], offWaits+i*waitBytes
	s.u64(off + waitBeat).Store(uint64(time.Now().Add(-2 * staleBeat).UnixNano()))
	_, err = ts[0].Ping(context.Background(), 1)
	var na *transport.NoAnswerError
	if !errors.Is(err, transport.ErrNoAnswer) || !errors.As(err, &na) || !strings.Contains(na.Why, "has not run for") {
		t.Fatalf("Ping(1) with a beat %v old: %v; want a NoAnswerError saying it has not run", 2*staleBeat, err)
	}

	ts[1].unpublish(i, true)
	ws, err = ts[0].Ping(context.Background(), 1)
	if err != nil || len(ws) != 1 || !ws[0].Failed {
		t.Fatalf("Ping(1) after the wait failed: %v, %v; want it reported as failed, and no error", ws, err)
	}

	// Every record held by a failed wait: each can be taken again.
	for range waitSlots - 1 {
		j := ts[1].publish(&note{op: opSend, peer: 0})
		if j < 0 {
			t.Fatal("no record free")
		}
		ts[1].unpublish(j, true)
	}
	if j := ts[1].publish(&note{op: opSend, peer: 0}); j < 0 {
		t.Fatalf("every record failed (%b), yet none was taken again", ts[1].waitFailed.Load())
	}
}
