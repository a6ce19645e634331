package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/transport"
)

// An aborting rank's reason reaches a peer receiving from it and a peer
// blocked sending to it.
func TestAbortNoticeReachesPeers(t *testing.T) {
	ts := newWorld(t, 3, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() { recvErr <- ts[1].Recv(ctx, 0, hdr(3), make([]byte, 100)) }()
	sendErr := make(chan error, 1)
	// Far more than the socket buffers hold, so the send blocks until rank 0 goes.
	go func() { sendErr <- ts[2].Send(ctx, 0, hdr(3), make([]byte, 64<<20)) }()
	// Wait until both operations are under way, as the stall record shows.
	for len(ts[1].Waits()) == 0 || len(ts[2].Waits()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("operations never started")
		default:
		}
	}
	if err := ts[0].Abort("rank 0 saw something it did not like"); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"receiver": recvErr, "sender": sendErr} {
		err := <-ch
		var ae *transport.AbortError
		if !errors.As(err, &ae) || ae.Rank != 0 || !strings.Contains(ae.Reason, "did not like") || !errors.Is(err, transport.ErrPeerGone) {
			t.Errorf("%s: got %v, want the abort notice of rank 0", name, err)
		}
	}
	for r := 1; r < 3; r++ {
		if d := ts[r].Dead(); len(d) != 0 {
			t.Errorf("rank %d counts %v as dead; rank 0 aborted and said so", r, d)
		}
	}
}

// A rank whose connections close without a notice (a killed process) is
// reported dead, and the stall record says what was waiting on it.
func TestDeadPeerAndWaits(t *testing.T) {
	ts := newWorld(t, 3, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts[2].Close()
	h := hdr(7)
	h.Seq, h.Coll = 42, transport.CollAllReduce
	err := ts[0].Recv(ctx, 2, h, make([]byte, 10))
	if !errors.Is(err, transport.ErrPeerGone) || !strings.Contains(err.Error(), "without an abort notice") {
		t.Fatalf("Recv from a dead rank = %v", err)
	}
	if d := ts[0].Dead(); !slices.Equal(d, []int{2}) {
		t.Errorf("Dead() = %v, want [2]", d)
	}
	ws := ts[0].Waits()
	if len(ws) != 1 || ws[0].Peer != 2 || ws[0].Op != "recv" || !ws[0].Failed || ws[0].Header.Seq != 42 || ws[0].Header.Step != 7 {
		t.Fatalf("Waits() = %+v, want the failed recv from rank 2 at seq 42 step 7", ws)
	}
	if s := ws[0].String(); !strings.Contains(s, "recv from rank 2 (allreduce #42 step 7") {
		t.Errorf("wait reads %q", s)
	}
	// A successful operation leaves no record.
	go ts[1].Send(ctx, 0, hdr(1), []byte("x"))
	if err := ts[0].Recv(ctx, 1, hdr(1), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if ws := ts[0].Waits(); len(ws) != 1 {
		t.Errorf("after a good recv Waits() = %+v, want only the failed one", ws)
	}
}

// A rank that receives a mismatched message tells the sender why.
func TestMismatchNotice(t *testing.T) {
	ts := newWorld(t, 2, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		if err := ts[0].Send(ctx, 1, hdr(0), make([]byte, 8)); err != nil {
			errc <- err
			return
		}
		errc <- ts[0].Recv(ctx, 1, hdr(1), make([]byte, 8))
	}()
	err := ts[1].Recv(ctx, 0, hdr(0), make([]byte, 16))
	if !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("receiver: %v, want a mismatch", err)
	}
	err = <-errc
	var ae *transport.AbortError
	if !errors.As(err, &ae) || ae.Rank != 1 || !strings.Contains(ae.Reason, "does not match") {
		t.Fatalf("sender: %v, want rank 1's notice about the mismatch", err)
	}
}

// What a peer sent before it went is read past: a rank that exits after a
// message this rank has not read yet is dead, one that aborts after it is
// not, and its notice still arrives after the message.
func TestDeadOrAbortedBehindUnreadInput(t *testing.T) {
	for _, abort := range []bool{false, true} {
		ts := newWorld(t, 2, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := ts[1].Send(ctx, 0, hdr(3), []byte("unread payload")); err != nil {
			t.Fatal(err)
		}
		if abort {
			ts[1].Abort("rank 1 gave up: testing")
		} else {
			ts[1].Close()
		}
		// The close reaches rank 0 through loopback: wait for it to
		// show, as a deadline, not a sleep.
		var dead []int
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if dead = ts[0].Dead(); len(dead) > 0 || abort {
				break
			}
		}
		if abort {
			if len(dead) != 0 {
				t.Errorf("aborted with input unread: Dead() = %v, want none", dead)
			}
			got := make([]byte, len("unread payload"))
			if err := ts[0].Recv(ctx, 1, hdr(3), got); err != nil || string(got) != "unread payload" {
				t.Fatalf("the message before the notice: %q, %v", got, err)
			}
			var ae *transport.AbortError
			if err := ts[0].Recv(ctx, 1, hdr(4), make([]byte, 8)); !errors.As(err, &ae) || ae.Reason != "rank 1 gave up: testing" {
				t.Fatalf("after the message: %v, want rank 1's notice", err)
			}
		} else if !slices.Equal(dead, []int{1}) {
			t.Errorf("closed with input unread: Dead() = %v, want [1]", dead)
		}
	}
}

// A receive cut off inside a message (its context ended, or poll took the
// message's first bytes) leaves the stream out of step: what is unread
// starts in the middle of a message. A peer that then aborts has not died:
// its notice, the last thing it sent, is still found behind those bytes.
func TestAbortedBehindPartlyReadMessage(t *testing.T) {
	for _, cut := range []int{10, transport.HeaderSize, transport.HeaderSize + 20} {
		ts := newWorld(t, 2, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		payload := make([]byte, 64)
		if err := ts[1].Send(ctx, 0, hdr(3), payload); err != nil {
			t.Fatal(err)
		}
		s := ts[0].peers[1].streams[0]
		s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(s.conn, make([]byte, cut)); err != nil {
			t.Fatal(err)
		}
		const reason = "rank 1 gave up: testing"
		ts[1].Abort(reason)
		var buf []byte
		for {
			st, got := s.peek(&buf)
			if st == peerAborted {
				if got != reason {
					t.Errorf("cut after %d bytes: peek found the notice %q, want %q", cut, got, reason)
				}
				break
			}
			if st == peerDied {
				t.Errorf("cut after %d bytes: peek says rank 1 died; it aborted", cut)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cut after %d bytes: the notice never showed", cut)
			}
		}
		if dead := ts[0].Dead(); len(dead) != 0 {
			t.Errorf("cut after %d bytes: Dead() = %v, want none (rank 1 aborted)", cut, dead)
		}
	}
}

// A notice written to a peer that has already closed its end is answered
// with a reset, which drops it: linger must not wait for it to be
// acknowledged (the kernel still counts it as unsent) until its deadline.
func TestLingerStopsOnReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	peer.Close()
	// Wait for the peer's FIN, so that the notice goes to a closed socket.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	s := newStream(c)
	if !s.notify("rank 0: test", time.Now().Add(10*time.Second)) {
		t.Fatal("the notice was not written")
	}
	const deadline = 20 * time.Second
	start := time.Now()
	s.linger(start.Add(deadline))
	if took := time.Since(start); took > deadline/2 {
		t.Fatalf("linger took %v on a reset connection, want it to return at once", took)
	}
}

// PeekNotice finds an abort notice on a connection nobody reads, without
// consuming it, and nothing where a peer only sent data.
func TestPeekNotice(t *testing.T) {
	ts := newWorld(t, 3, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts[1].Send(ctx, 0, hdr(1), []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := ts[2].Abort("rank 2 gives up"); err != nil {
		t.Fatal(err)
	}
	for {
		ae, ok := ts[0].PeekNotice(2)
		if ok {
			if ae.Rank != 2 || ae.Reason != "rank 2 gives up" {
				t.Fatalf("PeekNotice(2) = %+v", ae)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("rank 2's notice never showed")
		}
	}
	if ae, ok := ts[0].PeekNotice(1); ok {
		t.Errorf("PeekNotice(1) = %+v; rank 1 sent data, no notice", ae)
	}
	// The data is still there to read, and the notice is what a Recv
	// from rank 2 gets.
	got := make([]byte, 4)
	if err := ts[0].Recv(ctx, 1, hdr(1), got); err != nil || string(got) != "data" {
		t.Fatalf("Recv from rank 1 = %q, %v", got, err)
	}
	var ae *transport.AbortError
	if err := ts[0].Recv(ctx, 2, hdr(1), make([]byte, 4)); !errors.As(err, &ae) || ae.Reason != "rank 2 gives up" {
		t.Fatalf("Recv from rank 2 = %v, want its notice", err)
	}
}

// Looking for a notice behind unread input takes a buffer as large as the
// input, not peekMax: a failing rank inspects every peer, and 4 MiB per
// peer cost it tens of milliseconds on a busy machine. The notice and the
// message before it are both seen through it.
func TestPeekSizesItsBuffer(t *testing.T) {
	ts := newWorld(t, 2, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	payload, reason := "unread payload", "rank 1 gave up: testing"
	if err := ts[1].Send(ctx, 0, hdr(3), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	ts[1].Abort(reason)
	in := 2*transport.HeaderSize + len(payload) + len(reason) // the message and the notice
	s := ts[0].peers[1].streams[0]
	var buf []byte
	for {
		st, got := s.peek(&buf)
		if st == peerAborted {
			if got != reason {
				t.Fatalf("peek found the notice %q, want %q", got, reason)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the notice never showed: peek says %d", st)
		}
	}
	if cap(buf) != in+1 {
		t.Errorf("peek's buffer holds %d bytes for %d bytes of input, want %d (one more than the input)", cap(buf), in, in+1)
	}
}
