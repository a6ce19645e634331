package tcp

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/internal/spin"
	"github.com/collkit/collkit/transport"
)

// Connect builds the full mesh: it listens on Config.Addr (or takes
// Config.Listener), publishes the address under "tcp/addr/<rank>" in store,
// reads every other rank's (or takes Config.Peers, without the store),
// dials each lower rank Streams times and accepts the connections of the
// higher ranks. Each connection opens with a handshake that checks job id, ranks,
// world size and stream count; connections from strangers are rejected and
// logged while Connect keeps waiting for the real peers.
//
// Waiting for the other ranks to publish their addresses is bounded by ctx;
// reaching them and being reached, once the addresses are known, by
// Config.ConnectTimeout as well. Every rank dials rank 0 only after reading
// all addresses, so once Connect has returned nil on rank 0 no rank needs
// store any more. After an error the Transport cannot be used; Close it.
//
// Once the mesh is built the listener stays open until Close, but only to
// answer liveness probes (Ping) through the same handshake; it takes no
// new streams.
func (t *Transport) Connect(ctx context.Context, store bootstrap.Store) (err error) {
	t.mu.Lock()
	switch {
	case t.closed.Load():
		t.mu.Unlock()
		return fmt.Errorf("tcp: rank %d connect: %w", t.cfg.Rank, transport.ErrClosed)
	case t.started:
		t.mu.Unlock()
		return fmt.Errorf("tcp: rank %d: Connect called twice; make a new Transport to connect again", t.cfg.Rank)
	}
	t.started = true
	ctx, cancel := context.WithCancel(ctx)
	t.cancelConnect, t.connectDone = cancel, make(chan struct{})
	t.mu.Unlock()
	defer func() {
		cancel()
		t.mu.Lock()
		t.cancelConnect = nil
		t.mu.Unlock()
		close(t.connectDone)
		if err != nil && t.closed.Load() {
			err = fmt.Errorf("tcp: rank %d connect: %w", t.cfg.Rank, transport.ErrClosed)
		}
	}()

	peers := make([]*peer, t.cfg.Size)
	var ln net.Listener
	if t.cfg.Size > 1 {
		if ln, err = t.connect(ctx, store, peers); err != nil {
			return err
		}
	} else if t.cfg.Listener != nil {
		t.cfg.Listener.Close() // no peer to accept
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		for _, pr := range peers {
			if pr != nil {
				pr.closeConns()
			}
		}
		if ln != nil {
			ln.Close()
		}
		return transport.ErrClosed
	}
	if ln != nil {
		t.ln = ln
		t.wg.Add(1)
		go t.servePings(ln)
	}
	for _, pr := range peers {
		if pr != nil {
			pr.startWorkers()
		}
	}
	t.peers = peers
	t.connected.Store(true)
	return nil
}

// mesh collects the connections while Connect builds them.
type mesh struct {
	mu      sync.Mutex
	conns   [][]net.Conn // [rank][stream]
	claimed [][]bool
	left    int
	full    chan struct{} // closed when left reaches 0

	rejected map[int]string // why the last hello claiming a rank was rejected
}

func (m *mesh) noteReject(r int, why string) {
	m.mu.Lock()
	m.rejected[r] = why
	m.mu.Unlock()
}

// claim reserves the slot of rank r's stream s for a connection being set
// up, and reports false when it is taken.
func (m *mesh) claim(r, s int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claimed[r][s] {
		return false
	}
	m.claimed[r][s] = true
	return true
}

func (m *mesh) release(r, s int) {
	m.mu.Lock()
	m.claimed[r][s] = false
	m.mu.Unlock()
}

// put fills a claimed slot.
func (m *mesh) put(r, s int, c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conns[r][s] = c
	if m.left--; m.left == 0 {
		close(m.full)
	}
}

// Listen listens on host, on a port the kernel picks, for Config.Listener.
// The listening socket already has the congestion control that
// Config.Congestion = congestion gives the connections, so that those it
// accepts before Connect run it from their start. It fails as New would on
// a name this process may not set.
func Listen(host, congestion string) (net.Listener, error) {
	cc, err := pickCongestion(congestion)
	if err != nil {
		return nil, err
	}
	return listen(host, cc)
}

// listen listens on host with congestion control cc ("" for the kernel's).
func listen(host, cc string) (net.Listener, error) {
	lc := net.ListenConfig{Control: withCongestion(cc)}
	return lc.Listen(context.Background(), "tcp", net.JoinHostPort(host, "0"))
}

// withCongestion is a dialer's or listener's Control that sets congestion
// control cc on the socket before it connects or listens ("" sets none).
func withCongestion(cc string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		if cc != "" {
			c.Control(func(fd uintptr) { setCongestion(fd, cc) })
		}
		return nil
	}
}

// connect builds the mesh into peers and returns the listener, kept open
// for pings.
func (t *Transport) connect(ctx context.Context, store bootstrap.Store, peers []*peer) (net.Listener, error) {
	cfg := t.cfg
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = listen(cfg.Addr, t.congestion); err != nil {
			return nil, fmt.Errorf("tcp: rank %d cannot listen on %s: %w; set tcp.Config.Addr to an address of this host", cfg.Rank, cfg.Addr, err)
		}
	}
	// Set on the listening socket, the congestion control passes to the
	// connections it accepts before they start (see setCongestion). A
	// caller's listener may not have it (see Listen).
	if tl, ok := ln.(*net.TCPListener); ok && cfg.Listener != nil {
		if raw, err := tl.SyscallConn(); err == nil {
			withCongestion(t.congestion)("tcp", tl.Addr().String(), raw)
		}
	}
	self := ln.Addr().String()
	t.mu.Lock()
	t.addr = self
	t.mu.Unlock()

	m := &mesh{left: (cfg.Size - 1) * cfg.Streams, full: make(chan struct{}), rejected: make(map[int]string)}
	m.conns, m.claimed = make([][]net.Conn, cfg.Size), make([][]bool, cfg.Size)
	for r := range cfg.Size {
		m.conns[r], m.claimed[r] = make([]net.Conn, cfg.Streams), make([]bool, cfg.Streams)
	}

	// Accept from the start, so that strangers are turned away and early
	// peers are answered while this rank still waits for addresses.
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	closeLn := context.AfterFunc(actx, func() { ln.Close() })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return // closed: done, timed out or cancelled
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc := nc.(*net.TCPConn)
				t.tune(tc)
				t.handshakeIn(actx, tc, m)
			}()
		}
	}()
	// finish stops accepting and handshakes in progress. On success it
	// keeps the listener open, for pings, and reports whether it could (a
	// cancellation may have closed it first); otherwise it closes the
	// listener and the connections made so far.
	finish := func(ok bool) (kept bool) {
		if kept = ok && closeLn(); kept {
			// Ends the accept loop but leaves the socket listening.
			ln.(*net.TCPListener).SetDeadline(aLongTimeAgo)
		}
		acancel()
		wg.Wait()
		if kept {
			ln.(*net.TCPListener).SetDeadline(time.Time{})
			return true
		}
		ln.Close()
		for _, cs := range m.conns {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
		return false
	}

	addrs, err := t.addresses(ctx, store, self)
	if err != nil {
		finish(false)
		return nil, err
	}

	mctx, mcancel := context.WithTimeout(actx, cfg.ConnectTimeout)
	defer mcancel()
	errc := make(chan error, cfg.Rank)
	for r := range cfg.Rank {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range cfg.Streams {
				c, err := t.dial(mctx, r, string(addrs[r]), s)
				if err != nil {
					errc <- err
					mcancel()
					return
				}
				m.claim(r, s)
				m.put(r, s, c)
			}
		}()
	}

	select {
	case <-m.full:
		if !finish(true) {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("tcp: rank %d connect: %w", cfg.Rank, err)
			}
			return nil, fmt.Errorf("tcp: rank %d connect: the listener closed as the mesh was completed", cfg.Rank)
		}
		pollAll := onHost(self, addrs) <= runtime.NumCPU()
		for r := range cfg.Size {
			if r != cfg.Rank {
				pr := &peer{t: t, rank: r, addr: string(addrs[r]), streams: make([]*stream, cfg.Streams)}
				for s, c := range m.conns[r] {
					pr.streams[s] = newStream(c)
					pr.streams[s].budget = spin.Fixed(t.cfg.SpinWait)
					pr.streams[s].known = &pr.notice
					pr.streams[s].pollAll = pollAll
				}
				peers[r] = pr
			}
		}
		return ln, nil
	case <-mctx.Done():
	}
	finish(false)
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tcp: rank %d connect: %w", cfg.Rank, err)
	}
	// Every dial succeeded, so some higher ranks never reached this one.
	var missing []int
	for r := cfg.Rank + 1; r < cfg.Size; r++ {
		for _, c := range m.conns[r] {
			if c == nil {
				missing = append(missing, r)
				break
			}
		}
	}
	why := ""
	m.mu.Lock()
	for _, r := range missing {
		if reason, ok := m.rejected[r]; ok {
			why += fmt.Sprintf("; this rank rejected a connection claiming to be rank %d: %s", r, reason)
		}
	}
	m.mu.Unlock()
	return nil, &transport.PeerError{Rank: missing[0], Addr: string(addrs[missing[0]]), Op: "accept", Err: fmt.Errorf(
		"ranks %v published their addresses but did not connect to this rank at %s within %v: %w%s; "+
			"check that %s is reachable from their hosts (firewall, or the wrong interface: set tcp.Config.Addr) "+
			"and look at their own errors",
		missing, self, cfg.ConnectTimeout, context.DeadlineExceeded, why, self)}
}

// addresses returns every rank's address, by rank: Config.Peers, or else
// what the ranks publish in store, this one self.
func (t *Transport) addresses(ctx context.Context, store bootstrap.Store, self string) ([][]byte, error) {
	cfg := t.cfg
	if cfg.Peers != nil {
		addrs := make([][]byte, len(cfg.Peers))
		for r, a := range cfg.Peers {
			addrs[r] = []byte(a)
		}
		return addrs, nil
	}
	addrs, err := bootstrap.Exchange(ctx, store, "tcp/addr", cfg.Rank, cfg.Size, []byte(self))
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: exchanging addresses through the store: %w", cfg.Rank, err)
	}
	return addrs, nil
}

// dial connects stream s to rank r at addr, retrying with backoff until
// ctx ends, and runs the handshake.
func (t *Transport) dial(ctx context.Context, r int, addr string, s int) (net.Conn, error) {
	start := time.Now()
	backoff := 10 * time.Millisecond
	d := net.Dialer{Control: withCongestion(t.congestion)}
	var last error
	for attempt := 1; ; attempt++ {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			t.tune(nc.(*net.TCPConn))
			c, err := t.secureOut(ctx, nc, r, addr)
			if err != nil {
				return nil, err
			}
			if err := t.handshakeOut(ctx, c, r, addr, s, 0); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, &transport.PeerError{Rank: r, Addr: addr, Op: "connect", Err: fmt.Errorf(
				"rank %d could not connect after %d attempts in %v: %w (last error: %w); "+
					"check that rank %d is running and that %s is reachable from this host "+
					"(firewall, or the wrong interface: set tcp.Config.Addr on rank %d)",
				t.cfg.Rank, attempt, time.Since(start).Round(time.Millisecond), ctx.Err(), last, r, addr, r)}
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// tune sets the socket options every connection gets.
func (t *Transport) tune(c *net.TCPConn) {
	c.SetNoDelay(true)
	c.SetReadBuffer(t.cfg.SocketBuffer)
	c.SetWriteBuffer(t.cfg.SocketBuffer)
	// The kernel may grant less than asked (net.core.wmem_max) and reports
	// double what it grants; remember the smallest real send buffer.
	if raw, err := c.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if t.congestion != "" {
				// Dialed and accepted sockets have it from the start (an
				// accepted one from its listener); this covers connections a
				// caller's listener took before Connect set it there.
				ensureCongestion(fd, t.congestion)
			}
			if n, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF); err == nil {
				t.noteSendBuffer(n / 2)
			}
		})
	}
}

// handshakeOut introduces stream s of this rank to rank r and waits for the
// answer; with flagPing in flags, a ping instead of a stream.
func (t *Transport) handshakeOut(ctx context.Context, c net.Conn, r int, addr string, s int, flags uint16) error {
	dl := time.Now().Add(t.handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	defer stop()
	h := hello{Rank: uint32(t.cfg.Rank), Target: uint32(r), Size: uint32(t.cfg.Size),
		Stream: uint16(s), Streams: uint16(t.cfg.Streams), Flags: flags, JobID: t.cfg.JobID}
	secret := t.cfg.Secret
	if secret != nil {
		h.Flags |= flagAuth
	}
	perr := func(err error) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return &transport.PeerError{Rank: r, Addr: addr, Op: "connect", Err: err}
	}
	notPeer := func(err error) error {
		return perr(fmt.Errorf("the process at %s accepted the connection but did not complete the handshake: %w; "+
			"is a collkit rank of this job listening there?", addr, err))
	}
	hb := appendHello(nil, h)
	if _, err := c.Write(hb); err != nil {
		return perr(fmt.Errorf("sending the handshake of stream %d: %w", s, err))
	}
	b, err := readMsg(c)
	if err != nil {
		return notPeer(err)
	}
	var nonceA, nonceD [nonceLen]byte
	challenged := false
	if typ, _, _ := checkPrefix(b); typ == msgChallenge {
		if secret == nil {
			return perr(fmt.Errorf("%w: rank %d demands the job secret and this rank has none: give every rank "+
				"the same COLLKIT_SECRET (tcp.Config.Secret)", transport.ErrRejected, r))
		}
		if nonceA, err = decodeChallenge(b); err != nil {
			return notPeer(err)
		}
		nonceD, challenged = newNonce(), true
		p := proof{Nonce: nonceD, MAC: handshakeMAC(secret, labelDialer, &nonceA, &nonceD, hb)}
		if _, err := c.Write(appendProof(nil, p)); err != nil {
			return perr(fmt.Errorf("sending the secret proof of stream %d: %w", s, err))
		}
		if b, err = readMsg(c); err != nil {
			return notPeer(err)
		}
	}
	rep, err := decodeReply(b)
	if err != nil {
		return notPeer(err)
	}
	if !rep.Accept {
		return perr(fmt.Errorf("%w: rank %d refused stream %d from rank %d: %s",
			transport.ErrRejected, r, s, t.cfg.Rank, rep.explain(h)))
	}
	if secret != nil {
		if !challenged || !rep.Authed {
			return perr(fmt.Errorf("%w: the process at %s accepted stream %d without checking the job secret: "+
				"it runs without COLLKIT_SECRET or is not a rank of this job", transport.ErrRejected, addr, s))
		}
		want := handshakeMAC(secret, labelAcceptor, &nonceA, &nonceD, hb)
		if !hmac.Equal(want[:], rep.MAC[:]) {
			return perr(fmt.Errorf("%w: the process at %s does not hold this job's secret: "+
				"it belongs to another job, or the ranks were given different COLLKIT_SECRET values", transport.ErrRejected, addr))
		}
	} else if rep.Authed {
		return notPeer(fmt.Errorf("%w: an authenticated accept to a hello without a secret", errBadHandshake))
	}
	c.SetDeadline(time.Time{})
	return nil
}

// handshakeIn checks the hello on an accepted connection and puts the
// connection in its slot, or answers a ping (ping.go), or rejects it, logs
// why and closes it. m is nil once the mesh is built: then only pings are
// answered.
func (t *Transport) handshakeIn(ctx context.Context, tc *net.TCPConn, m *mesh) {
	var c net.Conn = tc
	remote := c.RemoteAddr().String()
	stop := context.AfterFunc(ctx, func() { tc.Close() })
	c.SetDeadline(time.Now().Add(t.handshakeTimeout))
	if t.cfg.TLS != nil {
		sc, err := t.secureIn(ctx, tc)
		if err != nil {
			if stop() {
				tc.Close()
				t.log.Warn("tcp: rejected a connection", "rank", t.cfg.Rank, "remote", remote,
					"why", "TLS handshake failed", "err", err)
			}
			return
		}
		c = sc
	}
	rej := reply{Rank: uint32(t.cfg.Rank), Size: uint32(t.cfg.Size), Streams: uint16(t.cfg.Streams), JobID: t.cfg.JobID}
	reject := func(why string, h hello, err error) {
		ours := stop() // false: Connect ended and closed the connection
		if ours {
			if rej.Reason != 0 {
				c.Write(appendReply(nil, rej))
			}
			c.Close()
		}
		if !ours && rej.Reason == 0 {
			return // cut off while it was still talking: not its fault
		}
		args := []any{"rank", t.cfg.Rank, "remote", remote, "why", why}
		if err != nil {
			args = append(args, "err", err)
		}
		if rej.Reason != 0 && rej.Reason != reasonMalformed && rej.Reason != reasonVersion {
			args = append(args, "claimed_rank", h.Rank, "claimed_job", h.JobID, "claimed_size", h.Size, "stream", h.Stream)
		}
		t.log.Warn("tcp: rejected a connection", args...)
		if m != nil && rej.Reason != 0 && rej.Reason != reasonMalformed && rej.Reason != reasonVersion && int(h.Rank) > t.cfg.Rank && int(h.Rank) < t.cfg.Size {
			m.noteReject(int(h.Rank), fmt.Sprintf("%s (it said job %q, world size %d, %d streams)", why, h.JobID, h.Size, h.Streams))
		}
	}

	b, err := readMsg(c)
	var h hello
	if err == nil {
		h, err = decodeHello(b)
		if err != nil {
			rej.Reason = reasonMalformed
		}
	} else if errors.Is(err, errVersion) {
		rej.Reason = reasonVersion
	}
	if err != nil {
		why := "not a collkit tcp handshake"
		if errors.Is(err, os.ErrDeadlineExceeded) {
			why = fmt.Sprintf("no handshake within %v", t.handshakeTimeout)
		}
		reject(why, h, err)
		return
	}
	authed := false
	var nonceA, nonceD [nonceLen]byte
	if secret := t.cfg.Secret; secret != nil || h.Flags&flagAuth != 0 {
		// Say nothing about this rank before the dialer has proved the secret.
		rej = reply{Reason: reasonAuth}
		switch {
		case secret == nil:
			reject("the dialer has a job secret and this rank has none", h, nil)
			return
		case h.Flags&flagAuth == 0:
			reject("no job secret offered", h, nil)
			return
		}
		nonceA = newNonce()
		if _, err := c.Write(appendChallenge(nil, &nonceA)); err != nil {
			rej.Reason = 0
			reject("lost during the secret challenge", h, err)
			return
		}
		pb, err := readMsg(c)
		var p proof
		if err == nil {
			p, err = decodeProof(pb)
		}
		if err != nil {
			reject("no valid answer to the secret challenge", h, err)
			return
		}
		want := handshakeMAC(secret, labelDialer, &nonceA, &p.Nonce, b)
		if !hmac.Equal(want[:], p.MAC[:]) {
			reject("wrong job secret (HMAC proof does not match)", h, nil)
			return
		}
		nonceD, authed = p.Nonce, true
		rej = reply{Rank: uint32(t.cfg.Rank), Size: uint32(t.cfg.Size), Streams: uint16(t.cfg.Streams), JobID: t.cfg.JobID}
	}
	me, size := uint32(t.cfg.Rank), uint32(t.cfg.Size)
	ping := h.Flags&flagPing != 0
	switch {
	case h.JobID != t.cfg.JobID:
		rej.Reason = reasonJob
	case h.Target != me:
		rej.Reason = reasonTarget
	case h.Size != size:
		rej.Reason = reasonSize
	case h.Streams != uint16(t.cfg.Streams):
		rej.Reason = reasonStreams
	case ping && (h.Rank == me || h.Rank >= size): // any other rank may ping
		rej.Reason = reasonRank
	case ping:
	case m == nil:
		rej.Reason = reasonBuilt
	case h.Rank <= me || h.Rank >= size:
		rej.Reason = reasonRank
	case int(h.Stream) >= t.cfg.Streams:
		rej.Reason = reasonStream
	case !m.claim(int(h.Rank), int(h.Stream)):
		rej.Reason = reasonDuplicate
	}
	if rej.Reason != 0 {
		reject(rej.Reason.String(), h, nil)
		return
	}
	acc := reply{Accept: true}
	if authed {
		acc.Authed, acc.MAC = true, handshakeMAC(t.cfg.Secret, labelAcceptor, &nonceA, &nonceD, b)
	}
	if ping {
		t.answerPing(c, acc)
		if stop() {
			c.Close()
		}
		return
	}
	r, s := int(h.Rank), int(h.Stream)
	if !stop() {
		m.release(r, s)
		return // Connect is over; the connection is closed
	}
	if _, err := c.Write(appendReply(nil, acc)); err != nil {
		m.release(r, s)
		c.Close()
		t.log.Warn("tcp: lost a connection during its handshake", "rank", t.cfg.Rank, "remote", remote,
			"claimed_rank", h.Rank, "stream", h.Stream, "err", err)
		return
	}
	c.SetDeadline(time.Time{})
	m.put(r, s, c)
}

// String describes t for logs.
func (t *Transport) String() string {
	return "tcp rank " + strconv.Itoa(t.cfg.Rank) + "/" + strconv.Itoa(t.cfg.Size) + " at " + t.Addr()
}

// onHost counts the ranks whose address has the host of self (this rank's
// address): the ranks that share this host's cores.
func onHost(self string, addrs [][]byte) int {
	host, _, _ := net.SplitHostPort(self)
	n := 0
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(string(a)); err == nil && h == host {
			n++
		}
	}
	return max(n, 1)
}
