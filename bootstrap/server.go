package bootstrap

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is the TCP side of the bootstrap store. Rank 0 (or a launcher)
// hosts it; every rank reaches it with Dial. It keeps the keys in memory and
// answers a Get as soon as the key is set, so waiting happens on the server
// and nobody polls over the network.
//
// The server drops any connection that does not open with a valid hello
// within a few seconds or that later sends a malformed frame, logs it, and
// goes on serving the others.
type Server struct {
	ln           net.Listener
	log          *slog.Logger
	secret       []byte        // nil: no authentication
	helloTimeout time.Duration // how long a new connection may stay silent
	writeTimeout time.Duration // how long a client may leave replies unread

	mu      sync.Mutex
	closed  bool
	values  map[string][]byte
	waiters map[string][]waiter // Gets waiting for a key
	conns   map[*serverConn]struct{}
	idle    chan struct{} // made by Shutdown, closed when conns is empty
	wg      sync.WaitGroup

	// The rendezvous (register.go).
	jobID      string         // the job served: ServerConfig.JobID, else the first registrant's
	size       int            // the first registrant's world size; 0 before
	sizeBy     Identity       // that registrant
	members    map[int]member // registered ranks
	complete   bool           // every rank of size registered
	failure    *frame         // why the rendezvous was stopped: the answer to every later request
	turnedAway []Identity     // the last few processes of other jobs
}

type waiter struct {
	c  *serverConn
	id uint64
}

// Listen starts a store server on addr ("host:port"; port 0 picks a free
// one) without authentication and serves in the background until Close.
func Listen(addr string) (*Server, error) {
	return ListenConfig(ServerConfig{Addr: addr})
}

// ServerConfig configures a store server.
type ServerConfig struct {
	// Addr is "host:port" to listen on; port 0 picks a free one.
	Addr string
	// Secret is the job secret clients must prove (see auth.go), at least
	// MinSecretLen bytes. Nil means any client that speaks the protocol may
	// read and write keys.
	Secret []byte
	// Log receives a warning for every connection the server drops and for
	// every registration it refuses. Nil means slog.Default().
	Log *slog.Logger
	// JobID is the job the store serves: a process that registers with
	// another job id is turned away (ErrJobMismatch). Empty means the job
	// of the first process that registers.
	JobID string
}

// ListenConfig starts a store server as cfg says and serves in the
// background until Close.
func ListenConfig(cfg ServerConfig) (*Server, error) {
	if cfg.Secret != nil && len(cfg.Secret) < MinSecretLen {
		return nil, fmt.Errorf("bootstrap: job secret of %d bytes: use at least %d random bytes (COLLKIT_SECRET)", len(cfg.Secret), MinSecretLen)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: store server cannot listen on %s: %w", cfg.Addr, err)
	}
	s := newServer(ln)
	s.secret, s.jobID = cfg.Secret, cfg.JobID
	if cfg.Log != nil {
		s.log = cfg.Log
	}
	s.start()
	return s, nil
}

// newServer returns a server on ln that has not started; tests adjust its
// settings before start.
func newServer(ln net.Listener) *Server {
	return &Server{
		ln:           ln,
		log:          slog.Default(),
		helloTimeout: 5 * time.Second,
		writeTimeout: time.Minute,
		values:       make(map[string][]byte),
		waiters:      make(map[string][]waiter),
		conns:        make(map[*serverConn]struct{}),
		members:      make(map[int]member),
	}
}

func (s *Server) start() {
	s.wg.Add(1)
	go s.accept()
}

// Addr is the address the server listens on, as "ip:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting connections, waits until every client has
// disconnected or ctx ends, and then closes the server. The host of the
// store calls it so that ranks still reading their last keys are not cut
// off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.idle == nil {
		s.idle = make(chan struct{})
		if len(s.conns) == 0 {
			close(s.idle)
		}
	}
	idle := s.idle
	s.mu.Unlock()
	s.ln.Close()
	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = fmt.Errorf("bootstrap: store server at %s closed with clients still connected: %w", s.Addr(), ctx.Err())
	}
	s.Close()
	return err
}

// Close stops the server, drops every client and waits for its goroutines.
// Clients waiting in Get see an error. Close is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		c.close()
	}
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) { // Shutdown closed it
		err = nil
	}
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed || s.idle != nil
			s.mu.Unlock()
			if !closed && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("bootstrap: store server stopped accepting", "addr", s.Addr(), "err", err)
			}
			return
		}
		c := &serverConn{s: s, nc: nc, wake: make(chan struct{}, 1), gets: make(map[uint64]string)}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go c.read()
		go c.write()
	}
}

// update replaces key's value by what fn makes of it (old, and whether key
// had a value), atomically under s.mu, answers the Gets that waited for key,
// and returns the new value; or it returns the error frame that refuses the
// request. Set, Create and Add are all updates, so each wakes waiting Gets
// the same way.
func (s *Server) update(c *serverConn, key string, fn func(old []byte, set bool) ([]byte, error)) ([]byte, *frame) {
	s.mu.Lock()
	if f := s.refusal(c); f != nil {
		s.mu.Unlock()
		return nil, f
	}
	if strings.HasPrefix(key, reservedPrefix) {
		s.mu.Unlock()
		return nil, &frame{typ: frameError, value: fmt.Appendf(nil, "keys under %q are the store's own", reservedPrefix)}
	}
	old, ok := s.values[key]
	value, err := fn(old, ok)
	if err != nil {
		s.mu.Unlock()
		return nil, &frame{typ: frameError, value: []byte(err.Error())}
	}
	s.values[key] = value
	ws := s.waiters[key]
	delete(s.waiters, key)
	for _, w := range ws {
		delete(w.c.gets, w.id)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.c.send(frame{typ: frameValue, id: w.id, value: value})
	}
	return value, nil
}

// get answers at once when key is set and registers a waiter otherwise.
func (s *Server) get(c *serverConn, id uint64, key string) {
	s.mu.Lock()
	if f := s.refusal(c); f != nil {
		s.mu.Unlock()
		e := *f
		e.id = id
		c.send(e)
		return
	}
	v, ok := s.values[key]
	if !ok {
		s.waiters[key] = append(s.waiters[key], waiter{c, id})
		c.gets[id] = key
	}
	s.mu.Unlock()
	if ok {
		c.send(frame{typ: frameValue, id: id, value: v})
	}
}

// cancel forgets the Get id of c, if it still waits.
func (s *Server) cancel(c *serverConn, id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key, ok := c.gets[id]; ok {
		delete(c.gets, id)
		s.removeWaiter(key, c, id)
	}
}

func (s *Server) removeWaiter(key string, c *serverConn, id uint64) {
	ws := s.waiters[key]
	for i, w := range ws {
		if w.c == c && w.id == id {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.waiters, key)
	} else {
		s.waiters[key] = ws
	}
}

// serverConn is one client connection: a reader that handles requests and a
// writer that sends replies from a queue, so that answering a waiter never
// blocks the store on a slow client.
type serverConn struct {
	s    *Server
	nc   net.Conn
	gets map[uint64]string // waiting Gets by id; guarded by s.mu
	// member is the identity this connection registered, refused the error
	// that answers its every request once it was turned away; guarded by
	// s.mu.
	member  *Identity
	refused *frame

	mu      sync.Mutex
	queue   [][]byte
	done    bool
	wake    chan struct{}
	closeMu sync.Once
}

func (c *serverConn) send(f frame) {
	b := appendFrame(nil, f)
	c.mu.Lock()
	if !c.done {
		c.queue = append(c.queue, b)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *serverConn) close() {
	c.closeMu.Do(func() {
		c.nc.Close()
		c.mu.Lock()
		c.done = true
		c.queue = nil
		c.mu.Unlock()
		select {
		case c.wake <- struct{}{}:
		default:
		}
	})
}

func (c *serverConn) write() {
	defer c.s.wg.Done()
	var batch [][]byte
	for range c.wake {
		c.mu.Lock()
		batch, c.queue = c.queue, batch[:0]
		done := c.done
		c.mu.Unlock()
		if done {
			return
		}
		for _, b := range batch {
			c.nc.SetWriteDeadline(time.Now().Add(c.s.writeTimeout))
			if _, err := c.nc.Write(b); err != nil {
				c.mu.Lock()
				done := c.done
				c.mu.Unlock()
				if done {
					return
				}
				c.s.log.Warn("bootstrap: dropping store client that does not read its replies",
					"remote", c.nc.RemoteAddr().String(), "err", err)
				c.close()
				return
			}
		}
		clear(batch)
	}
}

func (c *serverConn) read() {
	defer c.s.wg.Done()
	defer c.forget()
	defer c.close()
	remote := c.nc.RemoteAddr().String()

	// A client opens with a hello; anything else is a stranger.
	c.nc.SetReadDeadline(time.Now().Add(c.s.helloTimeout))
	f, buf, err := readFrame(c.nc, nil)
	if err == nil && (f.typ != frameHello || f.key != storeMagic || len(f.value) != 1) {
		err = fmt.Errorf("%w: first frame is type %#x, not a hello", errBadFrame, f.typ)
	}
	if err != nil {
		c.s.log.Warn("bootstrap: dropped a connection that is not a collkit store client",
			"remote", remote, "err", err)
		return
	}
	if f.value[0] != protoVersion {
		c.s.log.Warn("bootstrap: dropped a store client of another protocol version",
			"remote", remote, "version", f.value[0], "want", protoVersion)
		// Answer directly: the writer would be stopped before it sent this.
		c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		c.nc.Write(appendFrame(nil, frame{typ: frameError, id: f.id, value: fmt.Appendf(nil,
			"store protocol version %d, this server speaks %d: every rank must run the same collkit build",
			f.value[0], protoVersion)}))
		return
	}
	if s := c.s.secret; s != nil {
		nonceS := newNonce()
		c.send(frame{typ: frameChallenge, id: f.id, value: nonceS})
		p, b, err := readFrame(c.nc, buf)
		buf = b
		if err == nil && (p.typ != frameProof || len(p.value) != nonceLen+macLen) {
			err = fmt.Errorf("%w: answered the challenge with type %#x, %d bytes", errBadFrame, p.typ, len(p.value))
		}
		if err != nil {
			c.s.log.Warn("bootstrap: dropped a store client that did not answer the job secret challenge",
				"remote", remote, "err", err)
			return
		}
		nonceC := p.value[:nonceLen]
		if !hmac.Equal(p.value[nonceLen:], storeMAC(s, labelClient, nonceS, nonceC)) {
			c.s.log.Warn("bootstrap: dropped a store client with the wrong job secret", "remote", remote)
			c.nc.SetWriteDeadline(time.Now().Add(time.Second))
			c.nc.Write(appendFrame(nil, frame{typ: frameError, id: p.id, value: []byte(
				"wrong job secret: every rank must have the same COLLKIT_SECRET as the process hosting the store")}))
			return
		}
		c.nc.SetReadDeadline(time.Time{})
		c.send(frame{typ: frameWelcome, id: p.id, value: storeMAC(s, labelServer, nonceS, nonceC)})
	} else {
		c.nc.SetReadDeadline(time.Time{})
		c.send(frame{typ: frameOK, id: f.id})
	}

	for {
		f, buf, err = readFrame(c.nc, buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				c.s.log.Debug("bootstrap: store client left", "remote", remote)
			} else {
				c.s.log.Warn("bootstrap: dropped a store client", "remote", remote, "err", err)
			}
			return
		}
		switch f.typ {
		case frameSet:
			value := append([]byte{}, f.value...)
			if _, e := c.s.update(c, f.key, func([]byte, bool) ([]byte, error) { return value, nil }); e != nil {
				c.reply(f.id, nil, e)
			} else {
				c.send(frame{typ: frameOK, id: f.id})
			}
		case frameCreate:
			proposed := append([]byte{}, f.value...)
			v, e := c.s.update(c, f.key, func(old []byte, set bool) ([]byte, error) {
				if set {
					return old, nil
				}
				return proposed, nil
			})
			c.reply(f.id, v, e)
		case frameAdd:
			delta, err := strconv.ParseInt(string(f.value), 10, 64)
			if err != nil {
				c.s.log.Warn("bootstrap: dropped a store client that sent an Add without a decimal delta",
					"remote", remote, "delta", string(f.value))
				return
			}
			v, e := c.s.update(c, f.key, func(old []byte, set bool) ([]byte, error) {
				return addDecimal(f.key, old, set, delta)
			})
			c.reply(f.id, v, e)
		case frameRegister:
			c.s.register(c, f.id, f.value)
		case frameRoster:
			b, err := json.Marshal(c.s.roster())
			if err != nil { // cannot happen: a Roster always encodes
				c.send(frame{typ: frameError, id: f.id, value: []byte(err.Error())})
			} else {
				c.send(frame{typ: frameValue, id: f.id, value: b})
			}
		case frameGet:
			c.s.get(c, f.id, f.key)
		case frameCancel:
			c.s.cancel(c, f.id)
		default:
			c.s.log.Warn("bootstrap: dropped a store client that sent an unexpected frame",
				"remote", remote, "type", f.typ)
			return
		}
	}
}

// reply answers request id with value, or with the error frame e.
func (c *serverConn) reply(id uint64, value []byte, e *frame) {
	if e != nil {
		r := *e
		r.id = id
		c.send(r)
		return
	}
	c.send(frame{typ: frameValue, id: id, value: value})
}

// forget removes c's waiters and c itself from the server.
func (c *serverConn) forget() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, key := range c.gets {
		s.removeWaiter(key, c, id)
	}
	clear(c.gets)
	s.unregisterLocked(c)
	delete(s.conns, c)
	if s.idle != nil && len(s.conns) == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
}
