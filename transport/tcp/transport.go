package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/transport"
)

var _ transport.Transport = (*Transport)(nil)

// ErrNotConnected is wrapped by Send and Recv on a Transport whose Connect
// has not succeeded.
var ErrNotConnected = errors.New("tcp: transport not connected; call Connect first")

// Transport is one rank's TCP connections to every other rank of a job. It
// is made by New, connected by Connect and released by Close.
type Transport struct {
	cfg              Config
	log              *slog.Logger
	handshakeTimeout time.Duration // how long an accepted connection may stay silent

	mu            sync.Mutex
	started       bool               // Connect was called
	cancelConnect context.CancelFunc // while connecting
	connectDone   chan struct{}      // closed when Connect returns
	addr          string             // the address this rank advertised

	peers     []*peer // by rank; nil for this rank; set before connected
	connected atomic.Bool
	closed    atomic.Bool
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup

	ln      net.Listener       // after Connect: answers pings (ping.go); guarded by mu
	life    context.Context    // ends with Close: bounds the answers to pings
	endLife context.CancelFunc // called by Close

	sendBuffer atomic.Int64 // smallest kernel send buffer of any connection
	congestion string       // set on every connection; "" leaves the kernel's default
}

// Congestion is the TCP congestion control the connections use, or
// "system" when they keep the kernel's default (see Config.Congestion).
func (t *Transport) Congestion() string {
	if t.congestion == "" {
		return CongestionSystem
	}
	return t.congestion
}

var _ transport.Buffered = (*Transport)(nil)

// SendBuffer is the number of payload bytes a peer link holds without the
// peer receiving: the smallest kernel send buffer among the connections.
// Zero before Connect.
func (t *Transport) SendBuffer() int { return int(t.sendBuffer.Load()) }

func (t *Transport) noteSendBuffer(n int) {
	for {
		cur := t.sendBuffer.Load()
		if cur != 0 && cur <= int64(n) || t.sendBuffer.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// New checks cfg and returns an unconnected Transport. It does no network
// I/O: it only opens a socket of its own to try Config.Congestion.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cc, err := pickCongestion(cfg.Congestion)
	if err != nil {
		return nil, fmt.Errorf("tcp: invalid config for rank %d: %w", cfg.Rank, err)
	}
	life, endLife := context.WithCancel(context.Background())
	return &Transport{
		cfg:              cfg,
		congestion:       cc,
		log:              slog.Default(),
		handshakeTimeout: 5 * time.Second,
		done:             make(chan struct{}),
		life:             life,
		endLife:          endLife,
	}, nil
}

// Rank is this process's rank.
func (t *Transport) Rank() int { return t.cfg.Rank }

// Size is the number of ranks in the job.
func (t *Transport) Size() int { return t.cfg.Size }

// Addr is the "ip:port" this rank advertised to the others, or "" before
// Connect.
func (t *Transport) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addr
}

// Close closes every connection and the listener. Send and Recv calls in
// progress return errors wrapping transport.ErrClosed, and so does a Connect
// in progress. Close waits for the transport's goroutines and is safe to
// call more than once.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return nil
	}
	t.closed.Store(true)
	close(t.done)
	cancel, connecting := t.cancelConnect, t.connectDone
	t.mu.Unlock()
	if cancel != nil {
		cancel()
		<-connecting
	}
	t.mu.Lock()
	peers, ln := t.peers, t.ln
	t.mu.Unlock()
	if ln != nil {
		ln.Close() // a ping from now on is refused: this rank is gone, not stuck
	}
	if t.cfg.Listener != nil {
		t.cfg.Listener.Close() // Connect never took it
	}
	t.endLife()
	for _, pr := range peers {
		if pr != nil {
			pr.closeConns()
		}
	}
	t.wg.Wait()
	return nil
}

// Send delivers p to rank peer, framed by h. Payloads of at least
// 2*MinPiece bytes are cut into pieces sent concurrently over the streams
// (see Config.Streams); each piece carries the message's own header.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	pr, err := t.peer("send", peer)
	if err != nil {
		return err
	}
	if uint64(len(p)) > math.MaxUint32 {
		return pr.errorf("send", "message of %d bytes is larger than a header can describe (4 GiB); split it", len(p))
	}
	h.Len = uint32(len(p))
	pr.sendWait.begin(h, clock.Since())
	if k := pieces(len(p), len(pr.streams)); k > 1 {
		err = pr.sendPieces(ctx, h, p, k)
	} else if n, serr := pr.streams[0].send(ctx, h, p); serr != nil {
		err = pr.failed(ctx, "send", n, serr)
	}
	pr.sendWait.end(err)
	return err
}

// Recv receives the next message from rank peer into p, reading the
// payload straight into p.
func (t *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	pr, err := t.peer("recv", peer)
	if err != nil {
		return err
	}
	if uint64(len(p)) > math.MaxUint32 {
		return pr.errorf("recv", "message of %d bytes is larger than a header can describe (4 GiB); split it", len(p))
	}
	h.Len = uint32(len(p))
	now := clock.Since()
	pr.recvWait.begin(h, now)
	if k := pieces(len(p), len(pr.streams)); k > 1 {
		err = pr.recvPieces(ctx, h, p, k, now)
	} else if n, rerr := pr.streams[0].recv(ctx, pr.rank, h, p, now); rerr != nil {
		err = pr.failed(ctx, "recv", n, rerr)
	}
	pr.recvWait.end(err)
	return err
}

// peer returns the connection state for rank r, or the error that stops an
// operation with it before any I/O.
func (t *Transport) peer(op string, r int) (*peer, error) {
	switch {
	case t.closed.Load():
		return nil, &transport.PeerError{Rank: r, Op: op, Err: transport.ErrClosed}
	case r < 0 || r >= t.cfg.Size || r == t.cfg.Rank:
		return nil, &transport.PeerError{Rank: r, Op: op, Err: fmt.Errorf(
			"%w: rank %d is this rank or outside a job of %d ranks (this is rank %d)",
			transport.ErrBadPeer, r, t.cfg.Size, t.cfg.Rank)}
	case !t.connected.Load():
		return nil, &transport.PeerError{Rank: r, Op: op, Err: ErrNotConnected}
	}
	pr := t.peers[r]
	if pr.broken.Load() {
		return nil, pr.brokenErr(op)
	}
	return pr, nil
}

// peer is the connections to one other rank.
type peer struct {
	t       *Transport
	rank    int
	addr    string
	streams []*stream

	broken    atomic.Bool
	dead      atomic.Bool            // closed by the peer without an abort notice
	silent    atomic.Bool            // its last ping went unanswered: stopped or hung
	notice    atomic.Pointer[string] // an abort reason inspect found
	errMu     sync.Mutex
	err       error // the first error that broke the connections
	closeOnce sync.Once

	// With several streams, stream i > 0 has a send and a receive worker
	// that move pieces handed over on sendWork[i] and recvWork[i].
	sendWork, recvWork []chan piece
	sendDone, recvDone chan result

	sendWait, recvWait waitSlot // what Send and Recv wait on, for stall reports
}

type piece struct {
	ctx context.Context
	h   transport.Header
	p   []byte
}

type result struct {
	n   int
	err error
}

func (pr *peer) errorf(op, format string, args ...any) error {
	return &transport.PeerError{Rank: pr.rank, Addr: pr.addr, Op: op, Err: fmt.Errorf(format, args...)}
}

func (pr *peer) brokenErr(op string) error {
	pr.errMu.Lock()
	defer pr.errMu.Unlock()
	return &transport.PeerError{Rank: pr.rank, Addr: pr.addr, Op: op,
		Err: fmt.Errorf("connection unusable after an earlier error; close the transport: %w", pr.err)}
}

// fail records err as the reason the connections to pr are unusable and
// closes them, which also tells the peer.
func (pr *peer) fail(err error) {
	pr.errMu.Lock()
	if pr.err == nil {
		pr.err = err
	}
	pr.errMu.Unlock()
	// Once the sockets are closed here, nothing is left to look at: note
	// now whether the peer died (Dead reports it), whatever broke the
	// connection on this side. Not after a mismatch: the peer just spoke,
	// and the unread rest of its message stands where inspect looks for
	// message headers, so the notice it sends when it gives up in turn
	// (before it closes) would go unseen, and the close taken for a death.
	if !pr.dead.Load() && !errors.As(err, new(*transport.MismatchError)) {
		if _, died := pr.inspect(); died {
			pr.dead.Store(true)
		}
	}
	pr.broken.Store(true)
	pr.closeConns()
}

func (pr *peer) closeConns() {
	pr.closeOnce.Do(func() {
		for _, s := range pr.streams {
			s.close()
		}
	})
}

// failed turns an I/O error of one operation into the error the caller
// gets, and marks pr broken unless the byte stream is still in step: an
// operation stopped by its context before moving a byte leaves the
// connection usable.
func (pr *peer) failed(ctx context.Context, op string, moved int, err error) error {
	if pr.t.closed.Load() {
		return &transport.PeerError{Rank: pr.rank, Addr: pr.addr, Op: op, Err: transport.ErrClosed}
	}
	perr := &transport.PeerError{Rank: pr.rank, Addr: pr.addr, Op: op}
	if fromContext(err) {
		// Deadlines come only from ctx: its deadline, or its cancellation.
		if perr.Err = ctx.Err(); perr.Err == nil {
			perr.Err = context.DeadlineExceeded
		}
		if moved > 0 {
			pr.fail(perr)
		}
		return perr
	}
	if pr.broken.Load() { // another operation broke the connection under this one
		return pr.brokenErr(op)
	}
	var mm *transport.MismatchError
	var ae *transport.AbortError
	switch {
	case errors.As(err, &mm):
		perr.Err = err
		// The peer may be waiting on this rank: tell it why before hanging up.
		reason, dl := fmt.Sprintf("rank %d: %v", pr.t.cfg.Rank, err), time.Now().Add(time.Second)
		linger := time.Now().Add(500 * time.Millisecond)
		for _, s := range pr.streams {
			if s.notify(reason, dl) {
				s.linger(linger)
			}
		}
	case errors.As(err, &ae):
		perr.Err = err
		pr.notice.CompareAndSwap(nil, &ae.Reason)
	case errors.Is(err, transport.ErrBadFrame):
		perr.Err = fmt.Errorf("%w; the bytes from rank %d are out of step: it is not a collkit rank of this version, "+
			"or an earlier operation was cut short", err, pr.rank)
	case peerGone(err):
		if ae := pr.classifyGone(); ae != nil {
			perr.Err = ae
			break
		}
		perr.Err = fmt.Errorf("%w: rank %d died: %s closed the connection without an abort notice "+
			"(its process exited or was killed) (%v)", transport.ErrPeerGone, pr.rank, pr.addr, err)
	default:
		perr.Err = err
	}
	pr.fail(perr)
	return perr
}

func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// pickErr prefers a real error over the "closed" ones that aborting the
// sibling streams caused.
func pickErr(first, next error) error {
	if first == nil || (errors.Is(first, net.ErrClosed) && next != nil && !errors.Is(next, net.ErrClosed)) {
		return next
	}
	return first
}

// fromContext reports errors caused by the operation's context: a deadline
// set from it on the connection, or the context's own error.
func fromContext(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// hard reports errors after which the sibling streams of a message must be
// stopped; errors from the context reach every stream on their own.
func hard(err error) bool {
	return err != nil && !fromContext(err)
}

func (pr *peer) sendPieces(ctx context.Context, h transport.Header, p []byte, k int) error {
	dispatched := 1
	for i := 1; i < k; i++ {
		lo, hi := pieceBounds(len(p), k, i)
		select {
		case pr.sendWork[i] <- piece{ctx, h, p[lo:hi]}:
			dispatched++
			continue
		case <-pr.t.done:
		}
		break
	}
	lo, hi := pieceBounds(len(p), k, 0)
	moved, err := pr.streams[0].send(ctx, h, p[lo:hi])
	if hard(err) {
		pr.breakOff(err)
	}
	for range dispatched - 1 {
		r := <-pr.sendDone
		moved += r.n
		err = pickErr(err, r.err)
	}
	if err == nil && dispatched < k {
		err = net.ErrClosed
	}
	if err != nil {
		return pr.failed(ctx, "send", moved, err)
	}
	return nil
}

func (pr *peer) recvPieces(ctx context.Context, h transport.Header, p []byte, k int, start time.Duration) error {
	dispatched := 1
	for i := 1; i < k; i++ {
		lo, hi := pieceBounds(len(p), k, i)
		select {
		case pr.recvWork[i] <- piece{ctx, h, p[lo:hi]}:
			dispatched++
			continue
		case <-pr.t.done:
		}
		break
	}
	lo, hi := pieceBounds(len(p), k, 0)
	moved, err := pr.streams[0].recv(ctx, pr.rank, h, p[lo:hi], start)
	if hard(err) {
		pr.breakOff(err)
	}
	for range dispatched - 1 {
		r := <-pr.recvDone
		moved += r.n
		err = pickErr(err, r.err)
	}
	if err == nil && dispatched < k {
		err = net.ErrClosed
	}
	if err != nil {
		return pr.failed(ctx, "recv", moved, err)
	}
	return nil
}

// startWorkers starts the goroutines that move pieces on streams 1 and up.
func (pr *peer) startWorkers() {
	n := len(pr.streams)
	if n == 1 {
		return
	}
	pr.sendWork, pr.recvWork = make([]chan piece, n), make([]chan piece, n)
	pr.sendDone, pr.recvDone = make(chan result, n), make(chan result, n)
	for i := 1; i < n; i++ {
		pr.sendWork[i], pr.recvWork[i] = make(chan piece), make(chan piece)
		pr.t.wg.Add(2)
		go pr.work(pr.sendWork[i], pr.sendDone, func(j piece) (int, error) { return pr.streams[i].send(j.ctx, j.h, j.p) })
		go pr.work(pr.recvWork[i], pr.recvDone, func(j piece) (int, error) {
			return pr.streams[i].recv(j.ctx, pr.rank, j.h, j.p, clock.Since())
		})
	}
}

func (pr *peer) work(jobs <-chan piece, done chan<- result, do func(piece) (int, error)) {
	defer pr.t.wg.Done()
	for {
		select {
		case j := <-jobs:
			n, err := do(j)
			if hard(err) {
				pr.breakOff(err) // unblock the other pieces of this message
			}
			done <- result{n, err}
		case <-pr.t.done:
			return
		}
	}
}
