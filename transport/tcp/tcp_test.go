package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/transporttest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newWorld builds size connected transports in this process. A nil store
// means a fresh MemStore.
func newWorld(t testing.TB, size int, store bootstrap.Store, change func(*Config)) []*Transport {
	t.Helper()
	if store == nil {
		store = bootstrap.NewMemStore()
	}
	ts := make([]*Transport, size)
	for r := range ts {
		cfg := Config{Rank: r, Size: size, JobID: "test", ConnectTimeout: 20 * time.Second}
		if change != nil {
			change(&cfg)
		}
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr.log = quiet
		ts[r] = tr
	}
	t.Cleanup(func() {
		for _, tr := range ts {
			tr.Close()
		}
	})
	connect(t, store, ts...)
	return ts
}

func connect(t testing.TB, store bootstrap.Store, ts ...*Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, tr := range ts {
		wg.Go(func() { errs[i] = tr.Connect(ctx, store) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func asTransports(ts []*Transport) []transport.Transport {
	out := make([]transport.Transport, len(ts))
	for i, tr := range ts {
		out[i] = tr
	}
	return out
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		return asTransports(newWorld(t, size, nil, nil))
	})
}

// Three streams per peer, rendezvous through a real store server.
func TestConformanceStreams3(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		srv, err := bootstrap.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := bootstrap.Dial(ctx, srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return asTransports(newWorld(t, size, c, func(c *Config) { c.Streams = 3 }))
	})
}

// Listeners opened before the transports and every rank's address given
// as Config.Peers: the ranks connect without a store (nil here, so that a
// use of it would fail).
func TestConformancePeers(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		lns := make([]net.Listener, size)
		peers := make([]string, size)
		for r := range lns {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lns[r], peers[r] = ln, ln.Addr().String()
		}
		ts := make([]*Transport, size)
		for r := range ts {
			tr, err := New(Config{Rank: r, Size: size, JobID: "test", Listener: lns[r], Peers: peers, Streams: 2})
			if err != nil {
				t.Fatal(err)
			}
			tr.log = quiet
			ts[r] = tr
		}
		t.Cleanup(func() {
			for _, tr := range ts {
				tr.Close()
			}
		})
		connect(t, nil, ts...)
		for r, tr := range ts {
			if tr.Addr() != peers[r] && size > 1 {
				t.Errorf("rank %d advertises %s, want its listener's %s", r, tr.Addr(), peers[r])
			}
		}
		return asTransports(ts)
	})
}

// A listener given in Config is closed by Close even when the transport
// never connected, and Peers that do not fit are refused.
func TestListenerConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	self := ln.Addr().String()
	for _, cfg := range []Config{
		{Rank: 0, Size: 2, Peers: []string{self, self}},                                    // no Listener
		{Rank: 0, Size: 2, Listener: ln, Peers: []string{self}},                            // too few
		{Rank: 1, Size: 2, Listener: ln, Peers: []string{self, "127.0.0.1:1"}},             // not its own
		{Rank: 0, Size: 3, Listener: ln, Peers: []string{self, "127.0.0.1:1", self, self}}, // too many
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New accepted Peers %v for rank %d of %d (listener %v)", cfg.Peers, cfg.Rank, cfg.Size, cfg.Listener != nil)
		}
	}
	tr, err := New(Config{Rank: 0, Size: 2, Listener: ln, Peers: []string{self, "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if c, err := net.DialTimeout("tcp", self, time.Second); err == nil {
		c.Close()
		t.Errorf("the listener at %s still accepts after Close", self)
	}
}

func TestNew(t *testing.T) {
	bad := []Config{
		{Rank: 0, Size: 0},
		{Rank: 2, Size: 2},
		{Rank: -1, Size: 2},
		{Size: 2, Streams: -1},
		{Size: 2, Streams: MaxStreams + 1},
		{Size: 2, SocketBuffer: -1},
		{Size: 2, ConnectTimeout: -time.Second},
		{Size: 2, JobID: strings.Repeat("j", 256)},
		{Size: 2, Addr: "127.0.0.1:5000"},
		{Size: 2, Addr: "0.0.0.0"},
	}
	for _, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
	tr, err := New(Config{Rank: 1, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.cfg; c.Addr != "127.0.0.1" || c.Streams != 1 || c.SocketBuffer != DefaultSocketBuffer || c.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("defaults not applied: %+v", c)
	}
	err = tr.Send(context.Background(), 0, transport.Header{}, nil)
	if !errors.Is(err, ErrNotConnected) {
		t.Errorf("Send before Connect = %v, want ErrNotConnected", err)
	}
}

func TestPieces(t *testing.T) {
	for _, streams := range []int{1, 2, 3, 8, MaxStreams} {
		for _, n := range []int{0, 1, 2*MinPiece - 1, 2 * MinPiece, 2*MinPiece + 1, 3*MinPiece - 1, 1 << 20, 16<<20 + 7} {
			k := pieces(n, streams)
			if n < 2*MinPiece || streams == 1 {
				if k != 1 {
					t.Errorf("pieces(%d, %d) = %d, want 1", n, streams, k)
				}
				continue
			}
			if k < 2 || k > streams {
				t.Errorf("pieces(%d, %d) = %d", n, streams, k)
			}
			next := 0
			for i := range k {
				lo, hi := pieceBounds(n, k, i)
				if lo != next || hi-lo < MinPiece {
					t.Errorf("n=%d k=%d: piece %d is [%d, %d)", n, k, i, lo, hi)
				}
				next = hi
			}
			if next != n {
				t.Errorf("n=%d k=%d: pieces end at %d", n, k, next)
			}
		}
	}
	if smallMax >= MinPiece {
		t.Fatal("pieces must take the large path: smallMax >= MinPiece")
	}
}

// hdr is a header with every field set.
func hdr(step uint32) transport.Header {
	return transport.Header{Seq: 3, Count: 99, Comm: 5, Root: -1, Coll: transport.CollAllReduce, Algo: 2, Step: step}
}

func TestTransferSizes(t *testing.T) {
	for _, streams := range []int{1, 2, 3} {
		ts := newWorld(t, 2, nil, func(c *Config) { c.Streams = streams })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for i, n := range []int{0, 7, smallMax, smallMax + 1, 2*MinPiece - 1, 2 * MinPiece, 3*MinPiece + 2, 5<<20 + 3} {
			out := make([]byte, n)
			for j := range out {
				out[j] = byte(j*7 + i + n)
			}
			in := make([]byte, n)
			errc := make(chan error, 1)
			go func() { errc <- ts[0].Send(ctx, 1, hdr(uint32(i)), out) }()
			if err := ts[1].Recv(ctx, 0, hdr(uint32(i)), in); err != nil {
				t.Fatalf("streams %d, %d bytes: %v", streams, n, err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("streams %d, %d bytes: send: %v", streams, n, err)
			}
			if !bytes.Equal(in, out) {
				t.Fatalf("streams %d, %d bytes: payload corrupted", streams, n)
			}
		}
		cancel()
	}
}

// A mismatch on a split message, including one where the two sides cut the
// payload differently, fails both ends instead of hanging.
func TestMismatchSplit(t *testing.T) {
	cases := []struct{ sent, want int }{{1 << 20, 1 << 20}, {100 << 10, 1 << 20}, {1 << 20, 100 << 10}, {8, 1 << 20}}
	for _, c := range cases {
		ts := newWorld(t, 2, nil, func(c *Config) { c.Streams = 3 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		step := uint32(0)
		if c.sent == c.want {
			step = 1
		}
		errc := make(chan error, 1)
		go func() { errc <- ts[0].Send(ctx, 1, hdr(step), make([]byte, c.sent)) }()
		err := ts[1].Recv(ctx, 0, hdr(0), make([]byte, c.want))
		var mm *transport.MismatchError
		if !errors.As(err, &mm) {
			t.Errorf("sent %d, expected %d: Recv = %v, want a mismatch", c.sent, c.want, err)
		}
		serr := <-errc
		if errors.Is(serr, context.DeadlineExceeded) {
			t.Errorf("sent %d, expected %d: sender hung until its deadline", c.sent, c.want)
		}
		// The connection is marked broken: later calls fail at once.
		if err := ts[1].Recv(ctx, 0, hdr(0), make([]byte, 8)); !errors.As(err, &mm) {
			t.Errorf("Recv after a mismatch = %v, want the earlier mismatch", err)
		}
		cancel()
	}
}

// A Recv that gives up before any byte arrived leaves the connection usable.
func TestDeadlineBeforeDataKeepsConnection(t *testing.T) {
	ts := newWorld(t, 2, nil, nil)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts[1].Recv(short, 0, hdr(0), make([]byte, 8)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv = %v, want DeadlineExceeded", err)
	}
	ctx, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := ts[0].Send(ctx, 1, hdr(1), []byte("after")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := ts[1].Recv(ctx, 0, hdr(1), got); err != nil || string(got) != "after" {
		t.Fatalf("Recv after a timed-out Recv = %q, %v", got, err)
	}
}

func TestPeerGoneMessage(t *testing.T) {
	ts := newWorld(t, 2, nil, nil)
	ts[0].Close()
	err := ts[1].Recv(context.Background(), 0, hdr(0), make([]byte, 8))
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerGone) || !errors.As(err, &pe) || pe.Rank != 0 || pe.Addr == "" {
		t.Fatalf("Recv from a closed peer = %v", err)
	}
	if !strings.Contains(err.Error(), "rank 0 died: "+pe.Addr+" closed the connection without an abort notice") {
		t.Errorf("error does not explain: %v", err)
	}
}

func TestSmallSendRecvNoAllocs(t *testing.T) {
	ts := newWorld(t, 2, nil, nil)
	ctx := context.Background()
	out, in := make([]byte, 4<<10), make([]byte, 4<<10)
	h := hdr(0)
	allocs := testing.AllocsPerRun(200, func() {
		// 4 KiB fits the socket buffer, so one goroutine can send and receive.
		if err := ts[0].Send(ctx, 1, h, out); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].Recv(ctx, 0, h, in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a 4 KiB Send+Recv allocates %.1f times, want 0", allocs)
	}
	// The writev path and a context with a deadline that does not change.
	big := make([]byte, 256<<10)
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Minute))
	defer cancel()
	allocs = testing.AllocsPerRun(50, func() {
		if err := ts[0].Send(dctx, 1, h, big); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].Recv(ctx, 0, h, big); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		// The stream keeps its cancellation hook for the context (issue 21).
		t.Errorf("a 256 KiB Send+Recv with a context that can end allocates %.1f times, want 0", allocs)
	}
}

// strangers dial rank 0's listener while Connect waits for the real peers.
func TestStrangersRejected(t *testing.T) {
	const size = 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, logs, store, addr, done0 := listeningJob(t, ctx, size, Config{Streams: 2})

	good := hello{Rank: 1, Target: 0, Size: size, Stream: 0, Streams: 2, JobID: "job-A"}
	with := func(f func(*hello)) []byte { h := good; f(&h); return appendHello(nil, h) }
	strangers := []struct {
		name   string
		send   []byte
		reason reason // 0: no reply expected, just a hang-up
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0},
		{"silent", nil, 0},
		{"half a hello", appendHello(nil, good)[:12], 0},
		{"wrong job", with(func(h *hello) { h.JobID = "job-B" }), reasonJob},
		{"wrong target", with(func(h *hello) { h.Target = 2 }), reasonTarget},
		{"wrong size", with(func(h *hello) { h.Size = 4 }), reasonSize},
		{"wrong streams", with(func(h *hello) { h.Streams = 1; h.Stream = 0 }), reasonStreams},
		{"lower rank", with(func(h *hello) { h.Rank = 0 }), reasonRank},
		{"stream out of range", with(func(h *hello) { h.Stream = 2 }), reasonStream},
		{"bad body", append(appendMsg(nil, msgHello, 3), 1, 2, 3), reasonMalformed},
		{"other version", []byte{'C', 'K', 'T', 'C', 9, msgHello, 0, 0}, reasonVersion},
	}
	for _, s := range strangers {
		nc, err := net.Dial("tcp", string(addr))
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(s.send)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := readMsg(nc)
		switch {
		case s.reason == 0 && err == nil:
			t.Errorf("%s: got a reply %x, want a hang-up", s.name, b)
		case s.reason == 0 && errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("%s: rank 0 did not hang up", s.name)
		case s.reason != 0:
			rep, derr := decodeReply(b)
			if err != nil || derr != nil || rep.Accept || rep.Reason != s.reason {
				t.Errorf("%s: reply %+v (%v, %v), want a reject with reason %v", s.name, rep, err, derr, s.reason)
			}
		}
		nc.Close()
	}
	// The real peers still connect, and the mesh works.
	connect(t, store, ts[1], ts[2])
	if err := <-done0; err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- ts[2].Send(ctx, 0, hdr(0), []byte("real")) }()
	got := make([]byte, 4)
	if err := ts[0].Recv(ctx, 2, hdr(0), got); err != nil || string(got) != "real" {
		t.Fatalf("Recv = %q, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != len(strangers) {
		t.Errorf("%d warnings logged for %d strangers:\n%s", n, len(strangers), logs)
	}
}

// A peer of another job, world size or stream count is told why.
func TestMisconfiguredPeer(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Config)
		say    string
	}{
		{"job", func(c *Config) { c.JobID = "other" }, "COLLKIT_JOB_ID"},
		{"streams", func(c *Config) { c.Streams = 2 }, "tcp.Config.Streams"},
	}
	for _, c := range cases {
		store := bootstrap.NewMemStore()
		t0, _ := New(Config{Rank: 0, Size: 2, JobID: "j", ConnectTimeout: time.Second})
		cfg := Config{Rank: 1, Size: 2, JobID: "j", ConnectTimeout: time.Second}
		c.change(&cfg)
		t1, _ := New(cfg)
		t0.log, t1.log = quiet, quiet
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errc := make(chan error, 1)
		go func() { errc <- t0.Connect(ctx, store) }()
		err := t1.Connect(ctx, store)
		var pe *transport.PeerError
		if !errors.Is(err, transport.ErrRejected) || !errors.As(err, &pe) || pe.Rank != 0 || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s: Connect = %v, want a rejection by rank 0 mentioning %s", c.name, err, c.say)
		}
		if err := <-errc; err == nil {
			t.Errorf("%s: rank 0 connected to a misconfigured peer", c.name)
		} else {
			t.Logf("%s: rank 0: %v", c.name, err)
		}
		t0.Close()
		t1.Close()
		cancel()
	}
}

func TestConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	store := bootstrap.NewMemStore()
	ctx := context.Background()
	store.Set(ctx, "tcp/addr/0", []byte(dead)) // rank 0 published, then vanished
	const bound = 300 * time.Millisecond
	tr, err := New(Config{Rank: 1, Size: 2, ConnectTimeout: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	start := time.Now()
	err = tr.Connect(ctx, store)
	if el := time.Since(start); el > bound+2*time.Second {
		t.Errorf("Connect gave up after %v, bound %v", el, bound)
	}
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Rank != 0 || pe.Addr != dead || pe.Op != "connect" {
		t.Fatalf("Connect = %v, want a PeerError naming rank 0 at %s", err, dead)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 0 is running") {
		t.Errorf("error does not say what happened and what to do: %v", err)
	}
}

// Rank 0 never hears from rank 1, whose address it knows: Connect says so.
func TestAcceptTimeout(t *testing.T) {
	store := bootstrap.NewMemStore()
	ctx := context.Background()
	store.Set(ctx, "tcp/addr/1", []byte("127.0.0.1:9"))
	tr, _ := New(Config{Rank: 0, Size: 2, ConnectTimeout: 200 * time.Millisecond})
	defer tr.Close()
	err := tr.Connect(ctx, store)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Rank != 1 || pe.Op != "accept" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect = %v, want an accept PeerError naming rank 1", err)
	}
}

func TestCloseDuringConnect(t *testing.T) {
	tr, _ := New(Config{Rank: 0, Size: 2})
	errc := make(chan error, 1)
	go func() { errc <- tr.Connect(context.Background(), bootstrap.NewMemStore()) }()
	for tr.Addr() == "" { // wait until it listens and waits for rank 1
		runtime.Gosched()
	}
	tr.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Connect = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop Connect")
	}
}

func TestCloseLeaksNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		ts := newWorld(t, 3, nil, func(c *Config) { c.Streams = 3 })
		ctx := context.Background()
		buf := make([]byte, 1<<20)
		errc := make(chan error, 1)
		go func() { errc <- ts[0].Send(ctx, 2, hdr(0), buf) }()
		if err := ts[2].Recv(ctx, 0, hdr(0), buf); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			tr.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

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

// listeningJob makes a job of size ranks (job id "job-A", cfg's other
// settings) that log to one buffer and drop a silent dialer after 300 ms,
// and starts rank 0's Connect, which listens while it waits for the others.
// It returns the ranks (closed when the test ends), their log, the store,
// rank 0's address and where rank 0's Connect result arrives.
func listeningJob(t *testing.T, ctx context.Context, size int, cfg Config) ([]*Transport, *syncBuffer, bootstrap.Store, []byte, chan error) {
	t.Helper()
	store := bootstrap.NewMemStore()
	ts := make([]*Transport, size)
	logs := &syncBuffer{}
	for r := range ts {
		c := cfg
		c.Rank, c.Size, c.JobID, c.ConnectTimeout = r, size, "job-A", 20*time.Second
		tr, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		tr.log = slog.New(slog.NewTextHandler(logs, nil))
		tr.handshakeTimeout = 300 * time.Millisecond
		ts[r] = tr
		t.Cleanup(func() { tr.Close() })
	}
	done0 := make(chan error, 1)
	go func() { done0 <- ts[0].Connect(ctx, store) }()
	addr, err := store.Get(ctx, "tcp/addr/0")
	if err != nil {
		t.Fatal(err)
	}
	return ts, logs, store, addr, done0
}
