package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"
)

// Rendezvous connects this process to its job's store: rank 0 starts a
// Server listening on env.MasterAddr:env.MasterPort (unless
// env.StoreExternal says a launcher already hosts one), and every rank,
// rank 0 included, dials it. ctx bounds how long a rank waits for the store
// to come up; give it a deadline.
//
// Closing the returned io.Closer drops the client. On rank 0 it then waits,
// up to ShutdownGrace, until every other rank has closed its client too
// before it stops the server, so a rank still reading its last keys is not
// cut off; make sure the other ranks close theirs (or exit).
func Rendezvous(ctx context.Context, env Env) (Store, io.Closer, error) {
	if env.Size < 1 || env.Rank < 0 || env.Rank >= env.Size {
		return nil, nil, fmt.Errorf("bootstrap: rank %d of %d is not a valid place in a job", env.Rank, env.Size)
	}
	addr := env.StoreAddr()
	var srv *Server
	if env.Rank == 0 && !env.StoreExternal {
		var err error
		if srv, err = listenOn(ctx, env.MasterAddr, env.MasterPort, secretBytes(env.Secret)); err != nil {
			return nil, nil, err
		}
		addr = srv.Addr()
	}
	c, err := DialConfig(ctx, ClientConfig{Addr: addr, Secret: secretBytes(env.Secret)})
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, err
	}
	return c, closers{c, srv}, nil
}

type closers struct {
	c   *Client
	srv *Server
}

// ShutdownGrace bounds how long rank 0's Rendezvous closer waits for the
// other ranks to disconnect from its store.
const ShutdownGrace = 10 * time.Second

func (cs closers) Close() error {
	err := cs.c.Close()
	if cs.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
		defer cancel()
		err = errors.Join(err, cs.srv.Shutdown(ctx))
	}
	return err
}

// listenOn starts a Server on host:port, resolving host when it is a name
// and trying its addresses in turn.
func listenOn(ctx context.Context, host string, port int, secret []byte) (*Server, error) {
	ips := []string{host}
	if net.ParseIP(host) == nil {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank 0 cannot resolve MASTER_ADDR=%q: %w; set MASTER_ADDR to this host's IP address", host, err)
		}
		ips = ips[:0]
		for _, a := range addrs {
			ips = append(ips, a.IP.String())
		}
	}
	var errs []error
	for _, ip := range ips {
		srv, err := ListenConfig(ServerConfig{Addr: net.JoinHostPort(ip, strconv.Itoa(port)), Secret: secret})
		if err == nil {
			return srv, nil
		}
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%w; port %d is taken, perhaps by another job or an earlier run: choose another MASTER_PORT", err, port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%w; MASTER_ADDR=%s is not an address of this host: start rank 0 on the host MASTER_ADDR names, or point MASTER_ADDR at this host", err, host)
	}
	return nil, err
}

// LocalAddrFor returns the IP address of this host's interface that routes
// to remote ("host" or "host:port"), for advertising an address other ranks
// can reach. It sends no packets. When the route cannot be found it returns
// "127.0.0.1".
func LocalAddrFor(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || a.IP.IsUnspecified() {
		return "127.0.0.1"
	}
	return a.IP.String()
}

// Exchange publishes value under prefix/rank and returns every rank's value,
// indexed by rank, once all size ranks have published theirs. Each exchange
// needs its own prefix, since keys are written once.
func Exchange(ctx context.Context, s Store, prefix string, rank, size int, value []byte) ([][]byte, error) {
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("bootstrap: exchange %q: rank %d is outside a job of %d ranks", prefix, rank, size)
	}
	key := func(r int) string { return prefix + "/" + strconv.Itoa(r) }
	if err := s.Set(ctx, key(rank), value); err != nil {
		return nil, fmt.Errorf("bootstrap: exchange %q: publishing rank %d: %w", prefix, rank, err)
	}
	out := make([][]byte, size)
	for r := range size {
		if r == rank {
			out[r] = append([]byte{}, value...)
			continue
		}
		v, err := s.Get(ctx, key(r))
		if err != nil {
			return nil, fmt.Errorf("bootstrap: exchange %q: waiting for rank %d (key %q): %w", prefix, r, key(r), err)
		}
		out[r] = v
	}
	return out, nil
}

// Barrier returns once all size ranks have called it with the same prefix,
// or when ctx ends. Each barrier needs its own prefix.
func Barrier(ctx context.Context, s Store, prefix string, rank, size int) error {
	_, err := Exchange(ctx, s, prefix, rank, size, nil)
	return err
}

// secretBytes is s as a secret: nil (no authentication) when empty.
func secretBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
