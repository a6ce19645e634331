package collkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport/shm"
)

// Options.Transport "shm" works through Connect, as FromEnv uses it: three
// ranks meet through a real bootstrap store on loopback and all-reduce over
// shared memory.
func TestShmThroughConnect(t *testing.T) {
	if err := TransportAvailable("shm"); err != nil {
		t.Skip(err)
	}
	const n = 3
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			env := bootstrap.Env{Rank: r, Size: n, MasterAddr: "127.0.0.1", MasterPort: port, JobID: t.Name()}
			c, err := Connect(ctx, env, Options{Transport: "shm"})
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			if _, ok := unwrap(c.Transport()).(*shm.Transport); !ok {
				errs[r] = fmt.Errorf("rank %d: transport %T, want *shm.Transport", r, c.Transport())
				return
			}
			const count = 1000
			send, recv := make([]float32, count), make([]float32, count)
			for i := range send {
				send[i] = float32((r+1)*i) - 0.25
			}
			if err := AllReduce(ctx, c, send, recv, Sum); err != nil {
				errs[r] = err
				return
			}
			for i, got := range recv {
				// 1+2+3 = 6 times i, minus 0.25 from each rank; exact in float32.
				if want := float32(6*i) - 0.75; got != want {
					errs[r] = fmt.Errorf("rank %d: element %d = %v, want %v", r, i, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Ranks on two hosts (two segment directories here) asking for shm all get
// an error that names the hosts and what to use instead, without waiting
// for the deadline.
func TestShmOnDifferentHosts(t *testing.T) {
	if err := TransportAvailable("shm"); err != nil {
		t.Skip(err)
	}
	const n = 3
	dirs := []string{t.TempDir(), t.TempDir()}
	hosts := []string{"host-a", "host-a", "host-b"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := bootstrap.NewMemStore()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			host := hosts[r]
			cfg := shm.Config{Rank: r, Size: n, JobID: t.Name(), Dir: dirs[strings.Count(host, "b")]}
			tr, err := connectShmOn(ctx, bootstrap.Env{Rank: r, Size: n}, store, cfg, host, nil)
			if err == nil {
				tr.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		switch {
		case err == nil:
			t.Errorf("rank %d: no error", r)
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("rank %d waited for the deadline: %v", r, err)
		case !strings.Contains(err.Error(), `ranks 0,1 on "host-a", rank 2 on "host-b"`) || !strings.Contains(err.Error(), "use tcp"):
			t.Errorf("rank %d: %v\nwant the hosts of the ranks and what to use instead", r, err)
		}
	}
}

// freePort returns a loopback port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
