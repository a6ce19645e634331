package collkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// onRanks runs fn on n communicators over a fresh in-memory network, one
// goroutine per rank, and returns the ranks' errors.
func onRanks(t *testing.T, n int, opts func(rank int) Options, fn func(c *Comm) error) []error {
	t.Helper()
	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range net.Transports() {
		wg.Go(func() {
			c, err := New(tr, opts(r))
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			errs[r] = fn(c)
		})
	}
	wg.Wait()
	return errs
}

func TestRegisterAlgorithmRuns(t *testing.T) {
	var mu sync.Mutex
	var setups []AlgorithmSetup
	calls := 0
	registerAlgorithmForTest(t, "test-counting-ring", prepareFunc(func(s AlgorithmSetup) (AllReduceFunc, error) {
		mu.Lock()
		setups = append(setups, s)
		mu.Unlock()
		return func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return ring.AllReduce(ctx, t, h, send, recv)
		}, nil
	}))
	if !slices.Contains(Algorithms(), "test-counting-ring") {
		t.Fatalf("Algorithms() = %v, want the registered name among them", Algorithms())
	}
	if got := Algorithms()[:len(builtinAlgorithms)]; !slices.Equal(got, builtinAlgorithms) {
		t.Fatalf("Algorithms() begins with %v, want the built-ins %v", got, builtinAlgorithms)
	}
	nodes := []int{0, 0, 1}
	errs := onRanks(t, 3, func(int) Options { return Options{Algorithm: "test-counting-ring", Nodes: nodes, Transport: "mem"} },
		func(c *Comm) error {
			if c.Algorithm() != "test-counting-ring" {
				return fmt.Errorf("rank %d: Algorithm() = %q", c.Rank(), c.Algorithm())
			}
			x := []int32{int32(c.Rank()), 5, -7}
			if err := AllReduce(context.Background(), c, x, x, Sum); err != nil {
				return err
			}
			if want := []int32{3, 15, -21}; !slices.Equal(x, want) {
				return fmt.Errorf("rank %d: sum %v, want %v", c.Rank(), x, want)
			}
			return nil
		})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if calls != 3 || len(setups) != 3 {
		t.Fatalf("%d calls and %d Prepares, want 3 of each", calls, len(setups))
	}
	for _, s := range setups {
		if s.Transport != "mem" || !slices.Equal(s.Nodes, nodes) || s.Intra != nil || s.Tuning != nil {
			t.Errorf("Prepare got %+v, want transport mem and nodes %v", s, nodes)
		}
	}

	// Switching to it works too, and a Prepare error refuses it.
	registerAlgorithmForTest(t, "test-refusing", prepareFunc(func(AlgorithmSetup) (AllReduceFunc, error) {
		return nil, errors.New("needs a GPU")
	}))
	errs = onRanks(t, 1, func(int) Options { return Options{} }, func(c *Comm) error {
		if err := c.SetAlgorithm("test-counting-ring"); err != nil {
			return err
		}
		err := c.SetAlgorithm("test-refusing")
		if !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "needs a GPU") {
			return fmt.Errorf("SetAlgorithm(test-refusing) = %v, want ErrBadArgument with the reason", err)
		}
		if c.Algorithm() != "test-counting-ring" {
			return fmt.Errorf("after a refused switch the algorithm is %q", c.Algorithm())
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Ranks that run different registered algorithms, even the same function
// under two names, fail with a mismatch on every rank instead of hanging.
func TestRegisterAlgorithmMismatch(t *testing.T) {
	registerAlgorithmForTest(t, "test-ring-a", AllReduceFunc(ring.AllReduce))
	registerAlgorithmForTest(t, "test-ring-b", AllReduceFunc(ring.AllReduce))
	if algorithmID("test-ring-a") == algorithmID("test-ring-b") {
		t.Fatal("the test's two names have the same id")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := onRanks(t, 3, func(r int) Options {
		if r == 0 {
			return Options{Algorithm: "test-ring-a"}
		}
		return Options{Algorithm: "test-ring-b"}
	}, func(c *Comm) error {
		x := make([]float32, 1000)
		return AllReduce(ctx, c, x, x, Sum)
	})
	mismatches := 0
	for r, err := range errs {
		switch {
		case err == nil:
			t.Fatalf("rank %d: no error", r)
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("rank %d hung until the deadline: %v", r, err)
		case errors.Is(err, transport.ErrMismatch):
			mismatches++
		}
	}
	if mismatches == 0 {
		t.Fatalf("no rank reported a mismatch: %v", errs)
	}
}

func TestRegisterAlgorithmIDs(t *testing.T) {
	for i, name := range builtinAlgorithms {
		if algorithmID(name) != uint8(i) {
			t.Errorf("built-in %s has id %d, want %d (the wire format)", name, algorithmID(name), i)
		}
	}
	// The hash is part of the wire format: ranks of different builds must
	// agree on it.
	for name, want := range map[string]uint8{"myring": 21, "test-ring-a": 84, "test-ring-b": 157} {
		if got := algorithmID(name); got != want {
			t.Errorf("algorithmID(%q) = %d, want %d", name, got, want)
		}
	}
	for i := range 10000 {
		id := algorithmID(fmt.Sprint("name-", i))
		if id < builtinIDs || id >= adaptiveIDs && id < adaptiveIDs+builtinIDs {
			t.Fatalf("algorithmID(name-%d) = %d, inside the reserved ids", i, id)
		}
	}
	// Registration order does not change ids.
	for _, order := range [][]string{{"test-x", "test-y"}, {"test-y", "test-x"}} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			for _, name := range order {
				registerAlgorithmForTest(t, name, AllReduceFunc(ring.AllReduce))
			}
			for _, name := range order {
				if id, err := findAlgorithm(name); err != nil || id != algorithmID(name) {
					t.Errorf("findAlgorithm(%s) = %d, %v, want %d", name, id, err, algorithmID(name))
				}
			}
		})
	}
}

func TestRegisterAlgorithmPanics(t *testing.T) {
	// A name whose id is taken by a registered algorithm.
	registerAlgorithmForTest(t, "test-taken", AllReduceFunc(ring.AllReduce))
	collider := ""
	for i := 0; collider == ""; i++ {
		if name := fmt.Sprint("test-collider-", i); algorithmID(name) == algorithmID("test-taken") {
			collider = name
		}
	}
	run := AllReduceFunc(ring.AllReduce)
	cases := []struct {
		name, algo string
		a          Algorithm
		want       string
	}{
		{"nil", "test-nil", nil, "is nil"},
		{"nil func", "test-nil", AllReduceFunc(nil), "is nil"},
		{"duplicate", "ring", run, "called twice for algorithm ring"},
		{"empty name", "", run, "non-empty"},
		{"all", "all", run, `"all"`},
		{"comma", "a,b", run, "commas"},
		{"space", "a b", run, "spaces"},
		{"same id", collider, run, "same header id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, c.want) {
					t.Fatalf("panic %v, want one containing %q", r, c.want)
				}
			}()
			RegisterAlgorithm(c.algo, c.a)
		})
	}
	if slices.Contains(Algorithms(), collider) || slices.Contains(Algorithms(), "test-nil") {
		t.Fatal("a refused algorithm was registered")
	}
}

func TestRegisterTransportPanics(t *testing.T) {
	connect := func(context.Context, bootstrap.Env, bootstrap.Store, Options) (transport.Transport, error) {
		return nil, errors.New("unused")
	}
	cases := []struct {
		name, transport string
		d               TransportDriver
		want            string
	}{
		{"no connect", "test-none", TransportDriver{}, "no Connect"},
		{"duplicate", "shm", TransportDriver{Connect: connect}, "called twice for transport shm"},
		{"empty name", "", TransportDriver{Connect: connect}, "non-empty"},
		{"comma", "a,b", TransportDriver{Connect: connect}, "commas"},
		{"auto", AutoTransport, TransportDriver{Connect: connect}, `"auto"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, c.want) {
					t.Fatalf("panic %v, want one containing %q", r, c.want)
				}
			}()
			RegisterTransport(c.transport, c.d)
		})
	}
	if want := []string{"tcp", "shm", "nccl", "rdma"}; !slices.Equal(Transports()[:4], want) {
		t.Fatalf("Transports() = %v, want the built-ins %v first", Transports(), want)
	}
}

// A registered transport is what ConnectStore builds when
// Options.Transport names it, with the job's env and store.
func TestRegisterTransportConnect(t *testing.T) {
	const n = 3
	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	var mu sync.Mutex
	var envs []bootstrap.Env
	registerTransportForTest(t, "test-mem", TransportDriver{
		Connect: func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
			if opts.Transport != "test-mem" {
				return nil, fmt.Errorf("opts.Transport = %q", opts.Transport)
			}
			// Prove the store is the job's: every rank meets the others.
			if err := bootstrap.Barrier(ctx, store, "test-mem/up", env.Rank, env.Size); err != nil {
				return nil, err
			}
			mu.Lock()
			envs = append(envs, env)
			mu.Unlock()
			return net.Transports()[env.Rank], nil
		},
	})
	if err := TransportAvailable("test-mem"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := bootstrap.NewMemStore()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := ConnectStore(ctx, bootstrap.Env{Rank: r, Size: n, JobID: "test"}, store,
				Options{Transport: "test-mem", IntraNode: "group"})
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			x := []float64{float64(r), 0.5}
			if err := AllReduce(ctx, c, x, x, Sum); err != nil {
				errs[r] = err
				return
			}
			if x[0] != 3 || x[1] != 1.5 {
				errs[r] = fmt.Errorf("rank %d: sum %v, want [3 1.5]", r, x)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(envs) != n {
		t.Fatalf("Connect called %d times, want %d", len(envs), n)
	}
}
