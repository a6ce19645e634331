package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink that tests read while the server writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer starts a server on a free loopback port whose log goes to the
// returned buffer.
func startServer(t *testing.T, helloTimeout time.Duration) (*Server, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(ln)
	logs := &syncBuffer{}
	s.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s.helloTimeout = helloTimeout
	s.start()
	t.Cleanup(func() { s.Close() })
	return s, logs
}

func dial(t *testing.T, addr string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientsShareServer(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 4
	errs := make(chan error, n)
	for r := range n {
		go func() {
			c, err := Dial(ctx, s.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			vals, err := Exchange(ctx, c, "addr", r, n, []byte{byte(r)})
			for i, v := range vals {
				if len(v) != 1 || v[0] != byte(i) {
					err = errors.Join(err, errors.New("wrong value exchanged"))
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCancelledGetLeavesNoWaiter(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	c := dial(t, s.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := c.Get(ctx, "k")
		done <- err
	}()
	// Wait until the server holds the waiter, then cancel.
	for waiting := false; !waiting; {
		s.mu.Lock()
		waiting = len(s.waiters["k"]) == 1
		s.mu.Unlock()
		if !waiting {
			time.Sleep(time.Millisecond) // polling server state, not waiting for an event we could select on
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Get = %v", err)
	}
	// The cancel frame travels after the Get; a Set on the same connection
	// is answered after it, so by then the waiter is gone.
	if err := c.Set(context.Background(), "other", nil); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	n := len(s.waiters)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("server still holds %d waiters after the Get was cancelled", n)
	}
	// The connection is still good.
	if err := c.Set(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(context.Background(), "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get after cancel = %q, %v", v, err)
	}
}

func TestServerSurvivesStrangers(t *testing.T) {
	s, logs := startServer(t, 200*time.Millisecond)
	good := dial(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A Get waits on the server while strangers come and go.
	got := make(chan []byte, 1)
	go func() {
		v, _ := good.Get(ctx, "k")
		got <- v
	}()

	strangers := map[string][]byte{
		"garbage":       []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"huge length":   {0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		"set no hello":  appendFrame(nil, frame{typ: frameSet, key: "k", value: []byte("evil")}),
		"wrong magic":   appendFrame(nil, frame{typ: frameHello, key: "redis", value: []byte{1}}),
		"silent":        nil,
		"half a frame":  appendFrame(nil, frame{typ: frameHello, key: storeMagic, value: []byte{1}})[:7],
		"wrong version": appendFrame(nil, frame{typ: frameHello, key: storeMagic, value: []byte{99}}),
	}
	for name, b := range strangers {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(b)
		// The server hangs up on every one of them (the silent one and the
		// half frame after the hello timeout).
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		reply, err := io.ReadAll(nc)
		nc.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) { // EOF or reset both mean it hung up
			t.Errorf("%s: server did not hang up: %v", name, err)
		}
		if name == "wrong version" && !bytes.Contains(reply, []byte("protocol version 99")) {
			t.Errorf("wrong version: reply %q does not explain", reply)
		}
	}
	// A client after the hello that sends garbage is dropped too.
	bad := dial(t, s.Addr())
	bad.nc.Write([]byte{20, 0, 0, 0, 0x55, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19})
	if _, err := bad.Get(ctx, "k2"); err == nil {
		t.Error("Get on a connection the server dropped succeeded")
	}

	// The real client is untouched.
	if err := dial(t, s.Addr()).Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v := <-got; string(v) != "v" {
		t.Fatalf("Get = %q after strangers, want \"v\"", v)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n < len(strangers)+1 {
		t.Errorf("%d warnings logged for %d strangers:\n%s", n, len(strangers)+1, logs)
	}
}

func TestDialNobodyListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Dial(ctx, addr)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Dial took %v after a 300ms deadline", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial = %v, want it to wrap DeadlineExceeded", err)
	}
	for _, want := range []string{addr, "MASTER_ADDR", "MASTER_PORT", "rank 0", "firewall", "refused"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Dial error %q does not mention %q", err, want)
		}
	}
}

func TestDialLateServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, addr)
		if err == nil {
			err = c.Set(ctx, "k", []byte("v"))
			c.Close()
		}
		dialed <- err
	}()
	s, err := Listen(addr) // the server comes up after the client started trying
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	defer s.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
}

func TestDialNotAStore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		nc.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
		nc.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "not answer as a collkit store") {
		t.Fatalf("Dial to an SSH server = %v", err)
	}
}

func TestServerGoneAndClientClosed(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	c := dial(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error)
	go func() {
		_, err := c.Get(ctx, "never")
		done <- err
	}()
	c2 := dial(t, s.Addr())
	if err := c2.Set(ctx, "x", nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	err := <-done
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "lost the connection") {
		t.Fatalf("Get while the server closed = %v", err)
	}
	if err := c2.Set(ctx, "y", nil); err == nil {
		t.Fatal("Set after the server closed succeeded")
	}

	s2, _ := startServer(t, 5*time.Second)
	c3 := dial(t, s2.Addr())
	c3.Close()
	if err := c3.Set(ctx, "k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close = %v, want ErrClosed", err)
	}
}

// waitForWaiter returns once the server holds n Gets waiting for key.
func waitForWaiter(s *Server, key string, n int) {
	for {
		s.mu.Lock()
		waiting := len(s.waiters[key]) == n
		s.mu.Unlock()
		if waiting {
			return
		}
		time.Sleep(time.Millisecond) // polling server state, not waiting for an event we could select on
	}
}

// Create and Add set a key as Set does: the Gets waiting on the server for
// it, on this connection and on others, get its value.
func TestCreateAddWakeWaitingGets(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	c, other := dial(t, s.Addr()), dial(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		key, want string
		op        func() error
	}{
		{"created", "first", func() error { _, err := c.Create(ctx, "created", []byte("first")); return err }},
		{"counted", "-4", func() error { _, err := c.Add(ctx, "counted", -4); return err }},
	} {
		got := make(chan string, 2)
		for _, g := range []*Client{c, other} {
			go func() {
				v, err := g.Get(ctx, tc.key)
				if err != nil {
					v = []byte(err.Error())
				}
				got <- string(v)
			}()
		}
		waitForWaiter(s, tc.key, 2)
		if err := tc.op(); err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		for range 2 {
			if v := <-got; v != tc.want {
				t.Errorf("Get waiting for %q = %q, want %q", tc.key, v, tc.want)
			}
		}
	}
	s.mu.Lock()
	n := len(s.waiters)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("server still holds waiters for %d keys", n)
	}
}

// Keys under reservedPrefix are the store's own: Create and Add cannot
// write them either.
func TestCreateAddReservedKeys(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	c := dial(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, rosterKey, []byte("1")); err == nil || !strings.Contains(err.Error(), reservedPrefix) {
		t.Errorf("Create of %q = %v, want refused naming %q", rosterKey, err, reservedPrefix)
	}
	if _, err := c.Add(ctx, rosterKey, 1); err == nil || !strings.Contains(err.Error(), reservedPrefix) {
		t.Errorf("Add to %q = %v, want refused naming %q", rosterKey, err, reservedPrefix)
	}
	s.mu.Lock()
	_, set := s.values[rosterKey]
	s.mu.Unlock()
	if set {
		t.Error("a refused Create or Add set the roster key")
	}
}

// A client of the protocol before Create and Add is told, not dropped
// silently: every rank must run one build.
func TestOldProtocolClientTold(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(appendFrame(nil, frame{typ: frameHello, key: storeMagic, value: []byte{2}})); err != nil {
		t.Fatal(err)
	}
	f, _, err := readFrame(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("store protocol version 2, this server speaks %d: every rank must run the same collkit build", protoVersion)
	if f.typ != frameError || string(f.value) != want {
		t.Fatalf("reply to a version 2 hello: type %#x %q, want an error %q", f.typ, f.value, want)
	}
}
