//go:build rdma

package rdma

// #include <stdlib.h>
// #include <ucp/api/ucp.h>
// #include "ck.h"
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

var _ transport.Transport = (*Transport)(nil)

// Built reports whether this build has the UCX transport (the rdma tag).
const Built = true

// abortGrace bounds how long an aborted request may take to complete after
// it was canceled; past it the request is abandoned (its memory is leaked
// rather than freed under UCX).
const abortGrace = 5 * time.Second

// noPeerFailureMode remembers the UCX settings (TLS|NET_DEVICES) under
// which endpoints cannot use error handling mode PEER, so that UCX logs its
// complaint once per process rather than once per endpoint.
var noPeerFailureMode sync.Map

// peer is this rank's endpoint to another rank.
type peer struct {
	ep      C.ucp_ep_h
	epOpen  bool
	info    *C.ck_peer // C memory: the error handler's argument
	sendSeq uint64     // sequence number of the next message to send
	recvSeq uint64     // sequence number of the next message to receive
	gone    error      // why the peer can no longer be reached; nil while it can
}

// Transport is one rank's UCX worker and its endpoints to every other rank.
// It is made by New, connected by Connect and released by Close.
type Transport struct {
	cfg Config

	// mu serializes every call into the UCX worker (thread mode SERIALIZED)
	// and guards the fields below.
	mu        sync.Mutex
	started   bool
	connected bool
	closed    bool // no new operations
	aborting  bool // operations in flight give up
	ctx       C.ucp_context_h
	worker    C.ucp_worker_h
	peers     []peer
	events    *C.int // bumped by error handlers (C memory)
	seen      C.int
	free      []*staging // staging buffers not in use
	mapped    []*staging // every staging buffer
	ops       []*op      // op slots not in use
	allOps    []*op
	leaked    bool // an aborted request never completed
	bye       *op
	byeBuf    *staging
	closeReqs []unsafe.Pointer // endpoint close requests in flight
	waiters   int              // goroutines in wait
	poller    bool             // a waiter sleeps on epfd
	gen       chan struct{}    // closed whenever waiters should look again

	inflight  sync.WaitGroup // Send, Recv and Connect calls past their checks
	closeDone chan struct{}

	fdMu   sync.RWMutex // guards the file descriptors against Close
	epfd   int          // epoll over the worker's efd and wakefd
	wakefd int          // eventfd that interrupts a sleeping poller
}

// New checks cfg and returns an unconnected Transport. It does no I/O.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Transport{cfg: cfg, gen: make(chan struct{}), closeDone: make(chan struct{}), epfd: -1, wakefd: -1}, nil
}

// Rank is this process's rank.
func (t *Transport) Rank() int { return t.cfg.Rank }

// Size is the number of ranks in the job.
func (t *Transport) Size() int { return t.cfg.Size }

// String describes t for logs.
func (t *Transport) String() string {
	return fmt.Sprintf("rdma (UCX) rank %d/%d tls=%q net_devices=%q", t.cfg.Rank, t.cfg.Size, t.ucxSetting("TLS"), t.ucxSetting("NET_DEVICES"))
}

// ucxSetting is the value UCX uses for TLS or NET_DEVICES: the Config's,
// else the environment's, else "all".
func (t *Transport) ucxSetting(name string) string {
	v := map[string]string{"TLS": t.cfg.Transports, "NET_DEVICES": t.cfg.NetDevices}[name]
	if v == "" {
		v = os.Getenv("UCX_" + name)
	}
	if v == "" {
		v = "all"
	}
	return v
}

// Connect creates the UCX context and worker, publishes the worker's
// address under "rdma/addr/<rank>" in store, reads every other rank's,
// creates an endpoint to each (error handling mode PEER) and exchanges a
// hello with each that checks job id, ranks and world size. Waiting for the
// addresses is bounded by ctx; the hellos by Config.ConnectTimeout as well.
// After an error the Transport cannot be used; Close it.
func (t *Transport) Connect(ctx context.Context, store bootstrap.Store) error {
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return fmt.Errorf("rdma: rank %d connect: %w", t.cfg.Rank, transport.ErrClosed)
	case t.started:
		t.mu.Unlock()
		return fmt.Errorf("rdma: rank %d: Connect called twice; make a new Transport to connect again", t.cfg.Rank)
	}
	t.started = true
	t.inflight.Add(1)
	defer t.inflight.Done()
	addr, err := t.initLocked()
	t.mu.Unlock()
	if err != nil {
		return err
	}
	if t.cfg.Size == 1 {
		t.mu.Lock()
		t.connected = true
		t.mu.Unlock()
		return nil
	}
	addrs, err := bootstrap.Exchange(ctx, store, "rdma/addr", t.cfg.Rank, t.cfg.Size, addr)
	if err != nil {
		return fmt.Errorf("rdma: rank %d: exchanging UCX worker addresses through the store: %w", t.cfg.Rank, err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return fmt.Errorf("rdma: rank %d connect: %w", t.cfg.Rank, transport.ErrClosed)
	}
	for r := range t.cfg.Size {
		if r == t.cfg.Rank {
			continue
		}
		if len(addrs[r]) == 0 {
			t.mu.Unlock()
			return &transport.PeerError{Rank: r, Op: "connect", Err: fmt.Errorf("%w: rank %d published an empty UCX worker address", transport.ErrRejected, r)}
		}
		a := C.CBytes(addrs[r])
		pr := &t.peers[r]
		pr.info = (*C.ck_peer)(C.calloc(1, C.sizeof_ck_peer))
		pr.info.events = t.events
		st := C.ucs_status_t(C.UCS_ERR_UNREACHABLE)
		key := t.cfg.Transports + "|" + t.cfg.NetDevices
		if _, unsupported := noPeerFailureMode.Load(key); !unsupported {
			st = C.ck_ep(t.worker, a, pr.info, 1, &pr.ep)
			if st == C.UCS_ERR_UNREACHABLE {
				noPeerFailureMode.Store(key, true)
			}
		}
		if st == C.UCS_ERR_UNREACHABLE {
			// No transport here detects failed peers: fall back to the
			// goodbye message and the callers' deadlines.
			st = C.ck_ep(t.worker, a, pr.info, 0, &pr.ep)
		}
		C.free(a)
		if st != C.UCS_OK {
			t.mu.Unlock()
			return &transport.PeerError{Rank: r, Op: "connect", Err: fmt.Errorf(
				"creating a UCX endpoint to rank %d: %w; check that the ranks share a UCX transport (UCX_TLS=%q here)", r, errUCS(st), t.ucxSetting("TLS"))}
		}
		pr.epOpen = true
	}
	err = t.postByeLocked()
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rdma: rank %d connect: %w", t.cfg.Rank, err)
	}
	hctx, cancel := context.WithTimeout(ctx, t.cfg.ConnectTimeout)
	defer cancel()
	if err := t.hellos(hctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("rdma: rank %d connect: %w", t.cfg.Rank, transport.ErrClosed)
	}
	t.connected = true
	return nil
}

// initLocked creates the UCX context, worker and wake-up descriptors and
// returns the worker's address.
func (t *Transport) initLocked() ([]byte, error) {
	fail := func(what string, err error) ([]byte, error) {
		return nil, fmt.Errorf("rdma: rank %d: %s: %w (UCX_TLS=%q, UCX_NET_DEVICES=%q; `ucx_info -d` lists what UCX finds)",
			t.cfg.Rank, what, err, t.ucxSetting("TLS"), t.ucxSetting("NET_DEVICES"))
	}
	tls, nd, ka := cstr(t.cfg.Transports), cstr(t.cfg.NetDevices), cstr(ucxTime(t.cfg.PeerTimeout))
	st := C.ck_init(tls, nd, ka, &t.ctx)
	freeCStr(tls)
	freeCStr(nd)
	freeCStr(ka)
	if st != C.UCS_OK {
		t.ctx = nil
		return fail("initializing UCX", errUCS(st))
	}
	if st := C.ck_worker(t.ctx, &t.worker); st != C.UCS_OK {
		t.worker = nil
		return fail("creating the UCX worker", errUCS(st))
	}
	var efd C.int
	if st := C.ucp_worker_get_efd(t.worker, &efd); st != C.UCS_OK {
		return fail("getting the UCX worker's event descriptor", errUCS(st))
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fail("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return fail("eventfd", err)
	}
	t.fdMu.Lock()
	t.epfd, t.wakefd = epfd, wake
	t.fdMu.Unlock()
	for _, fd := range []int{int(efd), wake} {
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fail("epoll_ctl", err)
		}
	}
	t.events = (*C.int)(C.calloc(1, C.sizeof_int))
	t.peers = make([]peer, t.cfg.Size)
	var a *C.ucp_address_t
	var alen C.size_t
	if st := C.ucp_worker_get_address(t.worker, &a, &alen); st != C.UCS_OK {
		return fail("getting the UCX worker address", errUCS(st))
	}
	addr := C.GoBytes(unsafe.Pointer(a), C.int(alen))
	C.ucp_worker_release_address(t.worker, a)
	return addr, nil
}

// hello is the first message between two ranks.
const helloMagic = "collkit-rdma-1\x00\x00"

func (t *Transport) helloMsg() []byte {
	b := make([]byte, 0, len(helloMagic)+8+len(t.cfg.JobID))
	b = append(b, helloMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(t.cfg.Rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(t.cfg.Size))
	return append(b, t.cfg.JobID...)
}

// hellos sends a hello to every peer and checks every peer's.
func (t *Transport) hellos(ctx context.Context) error {
	me := t.helloMsg()
	type pending struct {
		o    *op
		buf  *staging
		peer int
		recv bool
	}
	var ps []pending
	release := func() {
		t.mu.Lock()
		for _, p := range ps {
			t.putLocked(p.o, p.buf)
		}
		t.mu.Unlock()
	}
	defer release()
	t.mu.Lock()
	for r := range t.cfg.Size {
		if r == t.cfg.Rank {
			continue
		}
		o, sb := t.getLocked()
		copy(sb.bytes(len(me)), me)
		C.ck_send(t.peers[r].ep, C.ucp_tag_t(ctrlTag(t.cfg.Rank, ctrlHello)), o.c, sb.addr, C.size_t(len(me)), nil, 0)
		ps = append(ps, pending{o, sb, r, false})
		o, sb = t.getLocked()
		C.ck_recv(t.worker, C.ucp_tag_t(ctrlTag(r, ctrlHello)), C.ucp_tag_t(math.MaxUint64), o.c, sb.addr, C.size_t(sb.size), nil, 0)
		ps = append(ps, pending{o, sb, r, true})
	}
	t.mu.Unlock()
	for _, p := range ps {
		op := map[bool]string{false: "connect", true: "accept"}[p.recv]
		reason := t.wait(ctx, p.o, p.peer, !p.recv)
		if err := p.o.err(); err != nil {
			if reason == nil {
				reason = err
			}
			return &transport.PeerError{Rank: p.peer, Op: op, Err: fmt.Errorf(
				"rank %d: no hello from rank %d over UCX within %v: %w; check that rank %d is running and that the ranks share a UCX transport (UCX_TLS=%q, UCX_NET_DEVICES=%q here)",
				t.cfg.Rank, p.peer, t.cfg.ConnectTimeout, reason, p.peer, t.ucxSetting("TLS"), t.ucxSetting("NET_DEVICES"))}
		}
		if !p.recv {
			continue
		}
		got := p.buf.bytes(int(p.o.c.length))
		if err := t.checkHello(p.peer, got); err != nil {
			return &transport.PeerError{Rank: p.peer, Op: op, Err: err}
		}
	}
	return nil
}

func (t *Transport) checkHello(r int, b []byte) error {
	if len(b) < len(helloMagic)+8 || string(b[:len(helloMagic)]) != helloMagic {
		return fmt.Errorf("%w: rank %d's hello is not a collkit rdma hello of this version", transport.ErrRejected, r)
	}
	b = b[len(helloMagic):]
	rank, size, job := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), string(b[8:])
	switch {
	case job != t.cfg.JobID:
		return fmt.Errorf("%w: rank %d is in job %q, this rank in job %q", transport.ErrRejected, r, job, t.cfg.JobID)
	case int(size) != t.cfg.Size:
		return fmt.Errorf("%w: rank %d has world size %d, this rank %d; every rank must use the same Size", transport.ErrRejected, r, size, t.cfg.Size)
	case int(rank) != r:
		return fmt.Errorf("%w: the process at rank %d's address says it is rank %d", transport.ErrRejected, r, rank)
	}
	return nil
}

// postByeLocked posts the receive for any peer's goodbye.
func (t *Transport) postByeLocked() error {
	if t.bye == nil {
		t.bye, t.byeBuf = t.getLocked()
	}
	st := C.ck_recv(t.worker, C.ucp_tag_t(ctrlTag(0, ctrlBye)), C.ucp_tag_t(ctrlBit|seqMask), t.bye.c, t.byeBuf.addr, C.size_t(t.byeBuf.size), nil, 0)
	if st != C.UCS_OK && st != C.UCS_INPROGRESS {
		return fmt.Errorf("posting the goodbye receive: %w", errUCS(st))
	}
	return nil
}

// getLocked takes an op slot and a staging buffer from the pools.
func (t *Transport) getLocked() (*op, *staging) {
	var o *op
	if n := len(t.ops); n > 0 {
		o, t.ops = t.ops[n-1], t.ops[:n-1]
	} else {
		o = newOp()
		t.allOps = append(t.allOps, o)
	}
	var s *staging
	if n := len(t.free); n > 0 {
		s, t.free = t.free[n-1], t.free[:n-1]
	} else {
		s = &staging{size: transport.HeaderSize + max(t.cfg.StagingBytes, 512)}
		if st := C.ck_map(t.ctx, C.size_t(s.size), &s.memh, &s.addr); st != C.UCS_OK {
			// Registration failed (out of pinned memory): fall back to
			// plain memory, which UCX copies or registers per message.
			s.memh, s.addr = nil, C.malloc(C.size_t(s.size))
		}
		t.mapped = append(t.mapped, s)
	}
	return o, s
}

func (t *Transport) putLocked(o *op, s *staging) {
	C.ck_release(o.c)
	o.pin.Unpin()
	t.ops = append(t.ops, o)
	t.free = append(t.free, s)
}

// check validates peer and the transport's state for op.
func (t *Transport) checkLocked(peer int, op string) error {
	switch {
	case peer < 0 || peer >= t.cfg.Size || peer == t.cfg.Rank:
		return &transport.PeerError{Rank: peer, Op: op, Err: fmt.Errorf("rank %d: %w %d: want another rank in [0, %d)", t.cfg.Rank, transport.ErrBadPeer, peer, t.cfg.Size)}
	case t.closed:
		return &transport.PeerError{Rank: peer, Op: op, Err: transport.ErrClosed}
	case !t.connected:
		return &transport.PeerError{Rank: peer, Op: op, Err: ErrNotConnected}
	}
	return nil
}

// Send delivers p to rank peer behind its header. Payloads up to
// Config.StagingBytes are copied into a registered staging buffer; larger
// ones are pinned and sent from p without a copy. It returns once UCX is done
// with p.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if len(p) > math.MaxUint32 {
		return &transport.PeerError{Rank: peer, Op: "send", Err: fmt.Errorf("payload of %d bytes exceeds the 4 GiB message limit", len(p))}
	}
	h.Len = uint32(len(p))
	t.mu.Lock()
	if err := t.checkLocked(peer, "send"); err != nil {
		t.mu.Unlock()
		return err
	}
	pr := &t.peers[peer]
	if pr.gone != nil {
		t.mu.Unlock()
		return &transport.PeerError{Rank: peer, Op: "send", Err: pr.gone}
	}
	if err := ctx.Err(); err != nil {
		t.mu.Unlock()
		return &transport.PeerError{Rank: peer, Op: "send", Err: err}
	}
	t.inflight.Add(1)
	defer t.inflight.Done()
	o, sb := t.getLocked()
	h.Encode(sb.bytes(transport.HeaderSize))
	tag := C.ucp_tag_t(dataTag(t.cfg.Rank, pr.sendSeq))
	if len(p) <= t.cfg.StagingBytes {
		copy(sb.bytes(transport.HeaderSize + len(p))[transport.HeaderSize:], p)
		C.ck_send(pr.ep, tag, o.c, sb.addr, C.size_t(transport.HeaderSize+len(p)), nil, 0)
	} else {
		o.pin.Pin(&p[0])
		C.ck_send(pr.ep, tag, o.c, sb.addr, transport.HeaderSize, unsafe.Pointer(&p[0]), C.size_t(len(p)))
	}
	pr.sendSeq++
	t.mu.Unlock()

	reason := t.wait(ctx, o, peer, true)
	return t.finish(o, sb, peer, "send", reason, func() error { return nil })
}

// Recv receives the next message from rank peer into p and checks its
// header against want.
func (t *Transport) Recv(ctx context.Context, peer int, want transport.Header, p []byte) error {
	if len(p) > math.MaxUint32 {
		return &transport.PeerError{Rank: peer, Op: "recv", Err: fmt.Errorf("buffer of %d bytes exceeds the 4 GiB message limit", len(p))}
	}
	want.Len = uint32(len(p))
	t.mu.Lock()
	if err := t.checkLocked(peer, "recv"); err != nil {
		t.mu.Unlock()
		return err
	}
	if err := ctx.Err(); err != nil {
		t.mu.Unlock()
		return &transport.PeerError{Rank: peer, Op: "recv", Err: err}
	}
	t.inflight.Add(1)
	defer t.inflight.Done()
	pr := &t.peers[peer]
	o, sb := t.getLocked()
	tag := C.ucp_tag_t(dataTag(peer, pr.recvSeq))
	staged := len(p) <= t.cfg.StagingBytes
	if staged {
		C.ck_recv(t.worker, tag, C.ucp_tag_t(math.MaxUint64), o.c, sb.addr, C.size_t(transport.HeaderSize+len(p)), nil, 0)
	} else {
		o.pin.Pin(&p[0])
		C.ck_recv(t.worker, tag, C.ucp_tag_t(math.MaxUint64), o.c, sb.addr, transport.HeaderSize, unsafe.Pointer(&p[0]), C.size_t(len(p)))
	}
	t.mu.Unlock()

	reason := t.wait(ctx, o, peer, false)
	return t.finish(o, sb, peer, "recv", reason, func() error {
		n := int(o.c.length)
		if n < transport.HeaderSize {
			return fmt.Errorf("%w: a %d-byte message from rank %d, shorter than a header", transport.ErrBadFrame, n, peer)
		}
		got, err := transport.Decode(sb.bytes(transport.HeaderSize))
		if err != nil {
			return fmt.Errorf("message from rank %d: %w", peer, err)
		}
		if err := want.Check(peer, got); err != nil {
			return err
		}
		if int(got.Len) != n-transport.HeaderSize {
			return fmt.Errorf("%w: rank %d's header says %d payload bytes, %d arrived", transport.ErrBadFrame, peer, got.Len, n-transport.HeaderSize)
		}
		if staged {
			copy(p, sb.bytes(n)[transport.HeaderSize:])
		}
		return nil
	})
}

// finish turns a completed (or abandoned) request into Send's or Recv's
// result and returns its slot to the pool. delivered checks a received
// message.
func (t *Transport) finish(o *op, sb *staging, peer int, opName string, reason error, delivered func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !o.done() {
		// Abandoned: UCX may still write into the slot, so it is never reused.
		t.leaked = true
		return &transport.PeerError{Rank: peer, Op: opName, Err: fmt.Errorf("%w (UCX did not release the request within %v)", reason, abortGrace)}
	}
	defer t.putLocked(o, sb)
	st := o.c.status
	if opName == "recv" && (st == C.UCS_OK || st == C.UCS_ERR_MESSAGE_TRUNCATED) {
		t.peers[peer].recvSeq++ // the message is consumed, whatever it held
	}
	var err error
	switch {
	case st == C.UCS_OK:
		err = delivered()
	case st == C.UCS_ERR_MESSAGE_TRUNCATED:
		err = fmt.Errorf("a message from rank %d is larger than the %d bytes expected: %w", peer, int(o.c.length)-transport.HeaderSize, ucsError(st))
		if got, derr := transport.Decode(sb.bytes(transport.HeaderSize)); derr == nil {
			want := got // the header is all Check can report on
			err = &transport.MismatchError{Peer: peer, Want: want, Got: got}
			err = fmt.Errorf("%w: %w", ucsError(st), err)
		}
	case reason != nil:
		err = reason
	default:
		err = ucsError(st)
		if g := t.peers[peer].gone; g != nil {
			err = fmt.Errorf("%w: %w", g, err)
		}
	}
	if err == nil {
		return nil
	}
	var me *transport.MismatchError
	if errors.As(err, &me) && err == error(me) {
		return me
	}
	return &transport.PeerError{Rank: peer, Op: opName, Err: err}
}

// wait drives the worker until o completes. It returns nil, or the reason
// it canceled o (context, Close, peer gone), in which case o may have
// completed anyway or, past abortGrace, not at all.
func (t *Transport) wait(ctx context.Context, o *op, peer int, send bool) error {
	spinUntil := time.Now().Add(t.cfg.SpinWait)
	var reason error
	var abortBy time.Time
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	kicked := false
	t.mu.Lock()
	t.waiters++
	defer func() {
		t.mu.Lock()
		t.waiters--
		t.mu.Unlock()
	}()
	for {
		t.progressLocked()
		if o.done() {
			t.mu.Unlock()
			return reason
		}
		if reason == nil {
			switch {
			case t.aborting:
				reason = transport.ErrClosed
			case t.peers[peer].gone != nil:
				reason = t.peers[peer].gone
			case ctx.Err() != nil:
				reason = ctx.Err()
			}
			if reason != nil {
				abortBy = time.Now().Add(abortGrace)
				C.ck_cancel(t.worker, o.c)
				if send {
					// A send UCX cannot take back leaves a hole in the
					// stream: the link to the peer is done for.
					t.breakPeerLocked(peer, fmt.Errorf("%w: a send to rank %d was abandoned (%v), so the link is closed", transport.ErrPeerGone, peer, reason))
				}
				continue
			}
		} else if time.Now().After(abortBy) {
			t.mu.Unlock()
			return reason
		}
		if reason == nil && time.Now().Before(spinUntil) {
			t.mu.Unlock()
			runtime.Gosched()
			t.mu.Lock()
			continue
		}
		if !t.poller {
			if st := C.ucp_worker_arm(t.worker); st == C.UCS_ERR_BUSY {
				continue // events came in: progress them first
			}
			t.poller = true
			t.mu.Unlock()
			if stop == nil && ctx.Done() != nil {
				stop = context.AfterFunc(ctx, t.kick)
			}
			timeout := -1
			if reason != nil {
				timeout = 10 // canceling: poll until the request lets go
			}
			var evs [2]unix.EpollEvent
			unix.EpollWait(t.epfd, evs[:], timeout)
			t.drainWake()
			t.mu.Lock()
			t.poller = false
			t.broadcastLocked()
			continue
		}
		if !kicked {
			// The sleeping poller armed the worker before this request
			// was posted: make it progress and arm again.
			kicked = true
			t.kick()
		}
		g := t.gen
		var done <-chan struct{}
		if reason == nil {
			done = ctx.Done()
		}
		t.mu.Unlock()
		var timer <-chan time.Time
		if reason != nil {
			tm := time.NewTimer(10 * time.Millisecond)
			defer tm.Stop()
			timer = tm.C
		}
		select {
		case <-g:
		case <-done:
		case <-timer:
		}
		t.mu.Lock()
	}
}

// progressLocked drives the worker until it has nothing to do and handles
// peer failures and goodbyes it brought.
func (t *Transport) progressLocked() {
	if t.worker == nil {
		return
	}
	n := C.ck_progress_all(t.worker)
	if *t.events != t.seen {
		t.seen = *t.events
		for r := range t.peers {
			pr := &t.peers[r]
			if pr.info != nil && pr.info.status != C.UCS_OK && pr.gone == nil {
				t.breakPeerLocked(r, fmt.Errorf("%w: UCX reported %w on the endpoint to rank %d (the process died or the network failed)",
					transport.ErrPeerGone, ucsError(pr.info.status), r))
				n++
			}
		}
	}
	for t.bye != nil && t.bye.done() {
		C.ck_release(t.bye.c)
		if t.bye.c.status == C.UCS_OK {
			r := tagRank(uint64(t.bye.c.sender_tag))
			if r < len(t.peers) && r != t.cfg.Rank && t.peers[r].gone == nil {
				t.peers[r].gone = fmt.Errorf("%w: rank %d closed its transport", transport.ErrPeerGone, r)
			}
		}
		if t.bye.c.status == C.UCS_ERR_CANCELED || t.closed || t.postByeLocked() != nil {
			t.bye.c.done = 0
			t.bye = nil
		}
		n++
	}
	if n > 0 && t.waiters > 1 {
		t.broadcastLocked()
	}
}

// breakPeerLocked marks peer gone and force-closes its endpoint, which
// completes its outstanding sends with an error.
func (t *Transport) breakPeerLocked(r int, why error) {
	pr := &t.peers[r]
	if pr.gone == nil {
		pr.gone = why
	}
	if pr.epOpen {
		pr.epOpen = false
		if req := C.ck_ep_close(pr.ep, 1); req != nil {
			t.closeReqs = append(t.closeReqs, req)
		}
	}
}

func (t *Transport) broadcastLocked() {
	close(t.gen)
	t.gen = make(chan struct{})
	if t.poller {
		t.kick()
	}
}

// kick wakes the goroutine sleeping on epfd.
func (t *Transport) kick() {
	t.fdMu.RLock()
	defer t.fdMu.RUnlock()
	if t.wakefd >= 0 {
		var one [8]byte
		one[0] = 1
		unix.Write(t.wakefd, one[:])
	}
}

func (t *Transport) drainWake() {
	var b [8]byte
	unix.Read(t.wakefd, b[:])
}

// Close says goodbye to every peer, so that their receives fail at once
// instead of waiting for a timeout, fails the calls in flight with
// ErrClosed and releases the worker, the endpoints and the registered
// memory. It is safe to call more than once.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		<-t.closeDone
		return nil
	}
	t.closed = true
	defer close(t.closeDone)
	if t.worker == nil {
		t.mu.Unlock()
		t.inflight.Wait()
		t.destroy()
		return nil
	}
	// Goodbyes. Waiting for the peers to acknowledge them would need the
	// peers to be progressing, which an idle rank is not; a goodbye that
	// never leaves is made good by the peer's error handler.
	var pending []*op
	var bufs []*staging
	for r := range t.peers {
		pr := &t.peers[r]
		if !pr.epOpen || pr.gone != nil {
			continue
		}
		o, sb := t.getLocked()
		C.ck_send(pr.ep, C.ucp_tag_t(ctrlTag(t.cfg.Rank, ctrlBye)), o.c, sb.addr, 8, nil, 0)
		pending, bufs = append(pending, o), append(bufs, sb)
	}
	t.mu.Unlock()
	t.drive(time.Second, func() bool {
		for _, o := range pending {
			if !o.done() {
				return false
			}
		}
		return true
	})

	t.mu.Lock()
	t.aborting = true
	for i, o := range pending {
		if o.done() {
			t.putLocked(o, bufs[i])
		} else {
			t.leaked = true
		}
	}
	for r := range t.peers {
		if r != t.cfg.Rank {
			t.breakPeerLocked(r, fmt.Errorf("%w: this rank closed", transport.ErrClosed))
		}
	}
	if t.bye != nil {
		C.ck_cancel(t.worker, t.bye.c)
	}
	t.broadcastLocked()
	t.kick()
	t.mu.Unlock()
	t.inflight.Wait()
	t.drive(abortGrace, func() bool {
		for i, req := range t.closeReqs {
			if req != nil {
				if C.ck_done(req) == 0 {
					return false
				}
				t.closeReqs[i] = nil
			}
		}
		return t.bye == nil || t.bye.done()
	})
	t.destroy()
	return nil
}

// drive progresses the worker until done reports true or d passes.
func (t *Transport) drive(d time.Duration, done func() bool) {
	end := time.Now().Add(d)
	for {
		t.mu.Lock()
		t.progressLocked()
		ok := done()
		t.mu.Unlock()
		if ok || time.Now().After(end) {
			return
		}
		var evs [2]unix.EpollEvent
		unix.EpollWait(t.epfd, evs[:], 1)
	}
}

// destroy releases everything UCX holds. Requests that never completed
// keep their memory (leaked) rather than have it freed under UCX.
func (t *Transport) destroy() {
	t.mu.Lock()
	defer t.mu.Unlock()
	unfinished := t.leaked
	for _, req := range t.closeReqs {
		if req != nil {
			unfinished = true
		}
	}
	if t.bye != nil && !t.bye.done() {
		unfinished = true
	}
	if t.worker != nil && !unfinished {
		for _, o := range t.allOps {
			o.free()
		}
		for r := range t.peers {
			if t.peers[r].info != nil {
				C.free(unsafe.Pointer(t.peers[r].info))
			}
		}
		C.ucp_worker_destroy(t.worker)
	}
	t.allOps, t.ops = nil, nil
	if t.ctx != nil && !unfinished {
		for _, s := range t.mapped {
			if s.memh != nil {
				C.ucp_mem_unmap(t.ctx, s.memh)
			} else {
				C.free(s.addr)
			}
		}
		C.ucp_cleanup(t.ctx)
	}
	t.mapped, t.free = nil, nil
	if t.events != nil && !unfinished {
		C.free(unsafe.Pointer(t.events))
	}
	t.worker, t.ctx = nil, nil
	t.fdMu.Lock()
	for _, fd := range []int{t.epfd, t.wakefd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	t.epfd, t.wakefd = -1, -1
	t.fdMu.Unlock()
}
