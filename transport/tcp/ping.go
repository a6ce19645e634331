package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// Liveness probes. A rank whose collective timed out asks its peers what
// they are waiting on, each over a connection of its own to the peer's
// listener, which Connect keeps open for this. A live peer answers from the
// goroutine that accepts, whatever its collective is doing. A stopped
// (SIGSTOP) or hung process does not, although its kernel still completes
// the TCP handshake and acknowledges what is sent: the answer has to come
// from the peer's own code, so no answer before the deadline means it is
// stuck. A refused connection means its transport is closed: it gave up or
// exited, and is not stuck.
//
// The probe is the handshake of a stream (secret and TLS included) with
// flagPing in the hello; after its accept the acceptor sends one msgWaits
// message:
//
//	count uint8 | count x (peer uint32 | op uint8 | failed uint8 | coll uint8 |
//	                       seq uint64 | step uint32 | len uint32 | waited_ms uint32)

var _ transport.Pinger = (*Transport)(nil)

const (
	// maxPingWaits bounds the waits one answer carries: the oldest, which
	// say most about a stall.
	maxPingWaits = 16
	waitLen      = 4 + 1 + 1 + 1 + 8 + 4 + 4 + 4 + 8 + 4 + 4 + 3 // ..., count, comm, root, dtype, op, algo
	opSend       = 1
	opRecv       = 2
)

// Ping asks rank peer's process what it is waiting on (see
// transport.Pinger), over a new connection bounded by ctx. The error wraps
// transport.ErrNoAnswer when the peer's process did not answer in time, and
// transport.ErrPeerGone when its listener is closed (it closed its
// transport, or exited) or it died.
func (t *Transport) Ping(ctx context.Context, peer int) ([]transport.Wait, error) {
	switch {
	case t.closed.Load():
		return nil, &transport.PeerError{Rank: peer, Op: "ping", Err: transport.ErrClosed}
	case peer < 0 || peer >= t.cfg.Size || peer == t.cfg.Rank:
		return nil, &transport.PeerError{Rank: peer, Op: "ping", Err: fmt.Errorf(
			"%w: rank %d is this rank or outside a job of %d ranks (this is rank %d)",
			transport.ErrBadPeer, peer, t.cfg.Size, t.cfg.Rank)}
	case !t.connected.Load():
		return nil, &transport.PeerError{Rank: peer, Op: "ping", Err: ErrNotConnected}
	}
	pr := t.peers[peer]
	perr := func(err error) error {
		return &transport.PeerError{Rank: peer, Addr: pr.addr, Op: "ping", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, perr(err) // no time to answer in: not the peer's fault
	}
	if pr.dead.Load() {
		return nil, perr(fmt.Errorf("%w: rank %d died (its connection closed without an abort notice)", transport.ErrPeerGone, peer))
	}
	start := time.Now()
	classify := func(err error) error {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			pr.silent.Store(true) // Abort does not wait for it to take a notice
			return perr(fmt.Errorf("%w within %v: its process is stopped or hung, or the network to it is cut (%v)",
				transport.ErrNoAnswer, time.Since(start).Round(time.Millisecond), err))
		}
		if peerGone(err) || errors.Is(err, syscall.ECONNREFUSED) {
			return perr(fmt.Errorf("%w: rank %d's listener at %s is closed: it closed its transport or exited (%w)",
				transport.ErrPeerGone, peer, pr.addr, err))
		}
		return perr(err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", pr.addr)
	if err != nil {
		return nil, classify(err)
	}
	defer nc.Close()
	c, err := t.secureOut(ctx, nc, peer, pr.addr)
	if err != nil {
		return nil, classify(err)
	}
	if err := t.handshakeOut(ctx, c, peer, pr.addr, 0, flagPing); err != nil {
		return nil, classify(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	b, err := readMsg(c)
	if err != nil {
		return nil, classify(unexpected(err))
	}
	ws, err := decodeWaits(b, time.Now())
	if err != nil {
		return nil, perr(err)
	}
	for _, w := range ws {
		if w.Peer >= t.cfg.Size {
			return nil, perr(fmt.Errorf("%w: a wait on rank %d in a job of %d ranks", errBadHandshake, w.Peer, t.cfg.Size))
		}
	}
	pr.silent.Store(false)
	return ws, nil
}

// servePings answers pings on ln, the listener Connect kept, until Close
// closes it.
func (t *Transport) servePings(ln net.Listener) {
	defer t.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		nc, err := ln.Accept()
		if err != nil {
			if !temporary(err) || t.closed.Load() {
				return // closed
			}
			// Out of descriptors or memory, for now: try again shortly.
			select {
			case <-time.After(backoff):
			case <-t.done:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.handshakeIn(t.life, nc.(*net.TCPConn), nil)
		}()
	}
}

func temporary(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// answerPing sends the accept of a ping and this rank's waits.
func (t *Transport) answerPing(c net.Conn, acc reply) {
	b := appendReply(nil, acc)
	b = appendWaits(b, t.Waits())
	c.Write(b)
}

// appendWaits appends the msgWaits message of ws (the first maxPingWaits)
// to dst.
func appendWaits(dst []byte, ws []transport.Wait) []byte {
	ws = ws[:min(len(ws), maxPingWaits)]
	dst = appendMsg(dst, msgWaits, 1+len(ws)*waitLen)
	dst = append(dst, byte(len(ws)))
	for _, w := range ws {
		op, failed := byte(opRecv), byte(0)
		if w.Op == "send" {
			op = opSend
		}
		if w.Failed {
			failed = 1
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(w.Peer))
		dst = append(dst, op, failed, byte(w.Header.Coll))
		dst = binary.LittleEndian.AppendUint64(dst, w.Header.Seq)
		dst = binary.LittleEndian.AppendUint32(dst, w.Header.Step)
		dst = binary.LittleEndian.AppendUint32(dst, w.Header.Len)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(min(w.Waited.Milliseconds(), math.MaxUint32)))
		dst = binary.LittleEndian.AppendUint64(dst, w.Header.Count)
		dst = binary.LittleEndian.AppendUint32(dst, w.Header.Comm)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(w.Header.Root))
		dst = append(dst, byte(w.Header.DType), byte(w.Header.Op), w.Header.Algo)
	}
	return dst
}

// decodeWaits parses a whole msgWaits message; now dates the waits.
func decodeWaits(b []byte, now time.Time) ([]transport.Wait, error) {
	typ, body, err := splitMsg(b)
	if err != nil {
		return nil, err
	}
	if typ != msgWaits || len(body) < 1 {
		return nil, fmt.Errorf("%w: message type %d with %d bytes, want the waits answering a ping", errBadHandshake, typ, len(body))
	}
	n := int(body[0])
	if n > maxPingWaits || len(body) != 1+n*waitLen {
		return nil, fmt.Errorf("%w: %d waits in %d bytes", errBadHandshake, n, len(body))
	}
	ws := make([]transport.Wait, n)
	for i := range ws {
		e := body[1+i*waitLen:]
		peer := binary.LittleEndian.Uint32(e)
		if peer > math.MaxInt32 {
			return nil, fmt.Errorf("%w: a wait on rank %d", errBadHandshake, peer)
		}
		if e[5] > 1 {
			return nil, fmt.Errorf("%w: wait state %d", errBadHandshake, e[5])
		}
		w := transport.Wait{Peer: int(peer), Failed: e[5] == 1}
		switch e[4] {
		case opSend:
			w.Op = "send"
		case opRecv:
			w.Op = "recv"
		default:
			return nil, fmt.Errorf("%w: wait operation %d", errBadHandshake, e[4])
		}
		w.Header = transport.Header{Coll: transport.Coll(e[6]),
			Seq: binary.LittleEndian.Uint64(e[7:]), Step: binary.LittleEndian.Uint32(e[15:]), Len: binary.LittleEndian.Uint32(e[19:])}
		w.Waited = time.Duration(binary.LittleEndian.Uint32(e[23:])) * time.Millisecond
		w.Header.Count, w.Header.Comm = binary.LittleEndian.Uint64(e[27:]), binary.LittleEndian.Uint32(e[35:])
		w.Header.Root = int32(binary.LittleEndian.Uint32(e[39:]))
		w.Header.DType, w.Header.Op, w.Header.Algo = reduce.DType(e[43]), reduce.Op(e[44]), e[45]
		w.Since = now.Add(-w.Waited)
		ws[i] = w
	}
	return ws, nil
}
