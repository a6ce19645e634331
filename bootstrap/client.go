package bootstrap

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// ErrClosed is returned by a Client's methods after Close.
var ErrClosed = errors.New("bootstrap: store client closed")

// Client is a Store backed by a Server over TCP. It is safe for concurrent
// use; calls share one connection and a Get waiting on the server does not
// hold up other calls.
type Client struct {
	addr string
	nc   net.Conn

	wmu  sync.Mutex // serializes writes
	wbuf []byte

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan frame
	err     error         // why the connection ended; set before done closes
	done    chan struct{} // closed when the reader stops
}

var (
	_ Store   = (*Client)(nil)
	_ Creator = (*Client)(nil)
	_ Adder   = (*Client)(nil)
)

// Dial connects to the store server at addr ("host:port") without a job
// secret. It retries with backoff until it gets through or ctx ends, so
// ranks may start before the server; give ctx a deadline. The error after
// ctx ends names the address and says what to check.
func Dial(ctx context.Context, addr string) (*Client, error) {
	return DialConfig(ctx, ClientConfig{Addr: addr})
}

// ClientConfig configures a store client.
type ClientConfig struct {
	// Addr is the server's "host:port".
	Addr string
	// Secret is the job secret: the client proves it to the server and
	// requires the server to prove it back. Nil means no authentication; a
	// server that demands a secret then refuses the client.
	Secret []byte
}

// DialConfig connects to the store server as cfg says, retrying like Dial.
func DialConfig(ctx context.Context, cfg ClientConfig) (*Client, error) {
	addr := cfg.Addr
	start := time.Now()
	backoff := 10 * time.Millisecond
	var d net.Dialer
	var last error
	for attempt := 1; ; attempt++ {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return handshake(ctx, addr, nc, cfg.Secret)
		}
		if last == nil || ctx.Err() == nil { // keep the cause, not "context canceled"
			last = err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bootstrap: cannot reach the store at %s after %d attempts in %v: %w%s (last error: %w); "+
				"check MASTER_ADDR and MASTER_PORT, that rank 0 (or the launcher hosting the store) is running, "+
				"and that no firewall blocks the port",
				addr, attempt, time.Since(start).Round(time.Millisecond), ctx.Err(), causeOf(ctx), last)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// handshake sends the hello on a fresh connection, answers the secret
// challenge when there is one, and starts the reader.
func handshake(ctx context.Context, addr string, nc net.Conn, secret []byte) (*Client, error) {
	fail := func(err error) (*Client, error) {
		nc.Close()
		return nil, fmt.Errorf("bootstrap: %s accepted a connection but did not answer as a collkit store: %w; "+
			"check that MASTER_PORT is the port of this job's store and not another service", addr, err)
	}
	refuse := func(format string, args ...any) (*Client, error) {
		nc.Close()
		return nil, fmt.Errorf("bootstrap: the store at %s: "+format, append([]any{addr}, args...)...)
	}
	dl := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	nc.SetDeadline(dl)
	if _, err := nc.Write(appendFrame(nil, frame{typ: frameHello, key: storeMagic, value: []byte{protoVersion}})); err != nil {
		return fail(err)
	}
	f, _, err := readFrame(nc, nil)
	if err != nil {
		return fail(err)
	}
	if f.typ == frameChallenge {
		if secret == nil {
			return refuse("it requires the job secret and this process has none: set COLLKIT_SECRET to the job's secret " +
				"(collbench's launcher sets it; with torchrun, mpirun or srun export the same value on every rank)")
		}
		if len(f.value) != nonceLen {
			return fail(fmt.Errorf("%w: challenge of %d bytes", errBadFrame, len(f.value)))
		}
		nonceS, nonceC := append([]byte(nil), f.value...), newNonce()
		proof := append(nonceC, storeMAC(secret, labelClient, nonceS, nonceC)...)
		if _, err := nc.Write(appendFrame(nil, frame{typ: frameProof, id: f.id, value: proof})); err != nil {
			return fail(err)
		}
		if f, _, err = readFrame(nc, nil); err != nil {
			return fail(err)
		}
		if f.typ == frameWelcome && !hmac.Equal(f.value, storeMAC(secret, labelServer, nonceS, nonceC)) {
			return refuse("it does not hold this job's secret: it belongs to another job, or the ranks were given different COLLKIT_SECRET values")
		}
	} else if secret != nil && f.typ == frameOK {
		return refuse("it does not check the job secret: it runs without COLLKIT_SECRET or is not this job's store; " +
			"give every rank and the store's host the same COLLKIT_SECRET")
	}
	if f.typ == frameError {
		nc.Close()
		return nil, fmt.Errorf("bootstrap: the store at %s refused this client: %s", addr, f.value)
	}
	if f.typ != frameOK && (f.typ != frameWelcome || secret == nil) {
		return fail(fmt.Errorf("%w: reply type %#x to hello", errBadFrame, f.typ))
	}
	nc.SetDeadline(time.Time{})
	c := &Client{addr: addr, nc: nc, nextID: 1, pending: make(map[uint64]chan frame), done: make(chan struct{})}
	go c.read()
	return c, nil
}

// Addr is the address of the server.
func (c *Client) Addr() string { return c.addr }

// Close drops the connection. Calls in progress return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = ErrClosed
	}
	c.mu.Unlock()
	err := c.nc.Close()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (c *Client) read() {
	var buf []byte
	for {
		var f frame
		var err error
		f, buf, err = readFrame(c.nc, buf)
		if err == nil && f.typ != frameOK && f.typ != frameValue && f.typ != frameError {
			err = fmt.Errorf("%w: unexpected reply type %#x", errBadFrame, f.typ)
		}
		if err != nil {
			c.mu.Lock()
			if c.err == nil {
				c.err = fmt.Errorf("bootstrap: lost the connection to the store at %s: %w; "+
					"the process hosting it (rank 0 or the launcher) may have exited", c.addr, err)
			}
			c.mu.Unlock()
			c.nc.Close()
			close(c.done)
			return
		}
		c.mu.Lock()
		ch := c.pending[f.id]
		delete(c.pending, f.id)
		c.mu.Unlock()
		if ch != nil { // nil: a Get that was cancelled
			f.value = append([]byte{}, f.value...)
			ch <- f
		}
	}
}

func (c *Client) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// call sends a request and waits for its reply.
func (c *Client) call(ctx context.Context, typ byte, key string, value []byte) (frame, error) {
	if err := ctx.Err(); err != nil {
		return frame{}, err
	}
	ch := make(chan frame, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return frame{}, c.err
	}
	id := c.nextID
	c.nextID++
	c.pending[id] = ch
	c.mu.Unlock()

	if err := c.write(ctx, frame{typ: typ, id: id, key: key, value: value}); err != nil {
		return frame{}, err
	}
	select {
	case f := <-ch:
		if f.typ == frameError {
			if sentinel := codeErrors[f.key]; sentinel != nil {
				return frame{}, &StoreError{Addr: c.addr, Err: sentinel, Detail: string(f.value)}
			}
			return frame{}, fmt.Errorf("bootstrap: store at %s: %s", c.addr, f.value)
		}
		return f, nil
	case <-c.done:
		return frame{}, c.failed()
	case <-ctx.Done():
		c.mu.Lock()
		_, waiting := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if waiting && typ == frameGet {
			// Best effort: stop the server from keeping the waiter.
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.write(wctx, frame{typ: frameCancel, id: id})
			cancel()
		}
		return frame{}, ctx.Err()
	}
}

// write sends one frame. A write cut short leaves the stream out of sync, so
// the connection is dropped.
func (c *Client) write(ctx context.Context, f frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	dl, ok := ctx.Deadline()
	if ok && !time.Now().Before(dl) {
		// Nothing written yet: the stream is still in sync, keep it (a
		// rank that timed out still asks the store who is missing).
		return context.DeadlineExceeded
	}
	c.nc.SetWriteDeadline(dl)
	c.wbuf = appendFrame(c.wbuf[:0], f)
	if _, err := c.nc.Write(c.wbuf); err != nil {
		c.nc.Close() // the reader records why
		<-c.done
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.failed()
	}
	return nil
}

// Set stores value under key on the server. It returns once the server has
// it, so a Get by any rank after Set returns sees it.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	if err := CheckSizes(key, value); err != nil {
		return err
	}
	_, err := c.call(ctx, frameSet, key, value)
	return err
}

// Get returns the value of key, waiting on the server until some rank sets
// it or ctx ends.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := CheckSizes(key, nil); err != nil {
		return nil, err
	}
	f, err := c.call(ctx, frameGet, key, nil)
	if err != nil {
		return nil, err
	}
	return f.value, nil
}

// Create sets key to value on the server unless key has a value, and
// returns the key's value after the call: of several ranks that create one
// key, the first wins and all get its value. Like Set, it wakes the Gets
// waiting for key.
func (c *Client) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	if err := CheckSizes(key, value); err != nil {
		return nil, err
	}
	f, err := c.call(ctx, frameCreate, key, value)
	if err != nil {
		return nil, err
	}
	return f.value, nil
}

// Add adds delta to the decimal integer stored under key on the server (0
// when key has no value) and returns the sum. It fails when key holds
// something other than a decimal integer.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := CheckSizes(key, nil); err != nil {
		return 0, err
	}
	f, err := c.call(ctx, frameAdd, key, strconv.AppendInt(nil, delta, 10))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(f.value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bootstrap: the store at %s answered Add of key %q with %q, not a decimal integer: %w", c.addr, key, f.value, err)
	}
	return n, nil
}
