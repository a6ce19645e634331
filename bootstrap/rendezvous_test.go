package bootstrap

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestRendezvous(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			port := freePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const n = 3
			errs := make(chan error, n)
			// Higher ranks start first and wait for rank 0's server.
			for r := n - 1; r >= 0; r-- {
				go func() {
					env := Env{Rank: r, Size: n, MasterAddr: host, MasterPort: port, JobID: "j"}
					s, closer, err := Rendezvous(ctx, env)
					if err != nil {
						errs <- err
						return
					}
					err = Barrier(ctx, s, "start", r, n)
					if err == nil {
						_, err = Exchange(ctx, s, "ids", r, n, []byte(strconv.Itoa(r)))
					}
					if err == nil {
						err = Barrier(ctx, s, "done", r, n) // rank 0 closes the server last
					}
					closer.Close()
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRendezvousExternalStore(t *testing.T) {
	srv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portStr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Rank 0 must not try to listen on the launcher's port: it would fail.
	env := Env{Rank: 0, Size: 1, MasterAddr: "127.0.0.1", MasterPort: port, StoreExternal: true}
	s, closer, err := Rendezvous(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	closer.Close()
	// Without StoreExternal rank 0 reports the taken port.
	env.StoreExternal = false
	if _, _, err := Rendezvous(ctx, env); err == nil {
		t.Fatal("rank 0 started a second server on a taken port")
	}
}

func TestRendezvousNotThisHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// 192.0.2.1 (TEST-NET-1) is never an address of this host.
	_, _, err := Rendezvous(ctx, Env{Rank: 0, Size: 2, MasterAddr: "192.0.2.1", MasterPort: freePort(t)})
	if err == nil {
		t.Fatal("rank 0 listened on an address that is not its own")
	}
	t.Log(err)
}

func TestLocalAddrFor(t *testing.T) {
	if got := LocalAddrFor("127.0.0.1:29500"); got != "127.0.0.1" {
		t.Errorf("LocalAddrFor(loopback) = %q", got)
	}
	if got := LocalAddrFor("no such host.invalid"); got != "127.0.0.1" {
		t.Errorf("LocalAddrFor(bad host) = %q, want the fallback", got)
	}
	if ip := net.ParseIP(LocalAddrFor("192.0.2.1")); ip == nil {
		t.Errorf("LocalAddrFor(remote) is not an IP")
	}
}
