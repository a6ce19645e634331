package collkit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport/tcp"
	"github.com/collkit/collkit/verify"
)

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// While ranks run verified all-reduces, strangers hit the job's store (rank
// 0 hosts it for the whole job) with random bytes, a hello without the
// secret and a guessed proof, and try every rank's transport port. They
// are turned away and logged; the all-reduces keep producing exact
// results.
func TestStrangersDuringAllReduce(t *testing.T) {
	logs := &lockedLog{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	defer slog.SetDefault(old)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			env := bootstrap.Env{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: port,
				JobID: "inflight", Secret: "in-flight-test-secret-0123"}
			cs[r], errs[r] = Connect(ctx, env, Options{Timeout: 20 * time.Second, Streams: 2})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer cs[r].Close()
	}

	// Every rank runs the same number of operations; the strangers come
	// while they run.
	const total = 20
	var ops atomic.Int64
	runErrs := make([]error, n)
	started := make(chan struct{}, n)
	for r, c := range cs {
		wg.Go(func() {
			const elems = 100_000
			send, recv, want := make([]byte, elems*4), make([]byte, elems*4), make([]byte, elems*4)
			for i := range total {
				seed := uint64(i + 1)
				verify.Fill(reduce.Float32, reduce.Sum, send, seed, r)
				if i == 0 {
					started <- struct{}{}
				}
				if err := c.AllReduce(ctx, Float32, Sum, send, recv); err != nil {
					runErrs[r] = err
					return
				}
				verify.Expect(reduce.Float32, reduce.Sum, want, seed, n)
				if w := verify.Wrong(reduce.Float32, recv, want); w != 0 {
					runErrs[r] = fmt.Errorf("all-reduce %d: %d wrong elements", i, w)
					return
				}
				if r == 0 {
					ops.Add(1)
				}
			}
		})
	}
	for range n {
		<-started
	}

	store := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	random := make([]byte, 4096)
	rand.Read(random)
	strangers := map[string][]byte{
		"random bytes": random,
		"http":         []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	}
	for name, b := range strangers {
		nc, err := net.Dial("tcp", store)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		nc.Write(b)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, nc) // until the store hangs up
		nc.Close()
	}
	// A client that speaks the protocol but has no secret, or a wrong one.
	if c, err := bootstrap.Dial(ctx, store); err == nil {
		c.Close()
		t.Error("a store client without the secret got in")
	}
	if c, err := bootstrap.DialConfig(ctx, bootstrap.ClientConfig{Addr: store, Secret: []byte("not-the-job-secret-at-all")}); err == nil {
		c.Close()
		t.Error("a store client with the wrong secret got in")
	}
	// The ranks' transport ports stay open after the mesh is built, only to
	// answer liveness probes (see tcp.Transport.Ping): a stranger's bytes
	// are refused and the connection hung up, and the job goes on.
	for r, c := range cs {
		addr := c.Transport().(*tcp.Transport).Addr()
		nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue // not listening at all is fine too
		}
		nc.Write(random)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		// EOF or a reset (the rank closed with our bytes unread) both
		// mean it hung up; only the deadline means it kept listening.
		if _, err := io.Copy(io.Discard, nc); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("rank %d did not hang up on a stranger at %s: %v", r, addr, err)
		}
		nc.Close()
	}
	during := ops.Load()
	wg.Wait()
	if err := errors.Join(runErrs...); err != nil {
		t.Fatalf("the job was disturbed: %v", err)
	}
	out := logs.String()
	for _, want := range []string{"not a collkit store client", "did not answer the job secret challenge", "wrong job secret"} {
		if !strings.Contains(out, want) {
			t.Errorf("no log of %q:\n%s", want, out)
		}
	}
	t.Logf("%d of %d verified all-reduces done when the last stranger was turned away; all %d exact", during, total, ops.Load())
	if ops.Load() != total {
		t.Errorf("rank 0 completed %d all-reduces, want %d", ops.Load(), total)
	}
}
