package algotest

import (
	"context"
	"fmt"
	"testing"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/rdma"
	"github.com/collkit/collkit/transport/shm"
	"github.com/collkit/collkit/transport/tcp"
	"github.com/collkit/collkit/transport/transporttest"
)

// MemWorld is a World over a fresh in-memory network.
func MemWorld(t testing.TB, n int) []transport.Transport {
	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	return net.Transports()
}

// NamedWorld is a World and the transport name benchmarks label it with.
type NamedWorld struct {
	Name  string
	World World
}

// BenchWorlds are the in-process worlds the benchmarks compare algorithms
// over: "mem" (MemWorld) and "tcp" (TCPWorld).
func BenchWorlds() []NamedWorld {
	return []NamedWorld{{"mem", MemWorld}, {"tcp", TCPWorld}}
}

// TCPWorld is a World of n ranks in this process over loopback TCP.
func TCPWorld(t testing.TB, n int) []transport.Transport { return TCPWorldWith(tcp.Config{})(t, n) }

// TCPWorldWith is TCPWorld with cfg (its Rank and Size are ignored).
func TCPWorldWith(cfg tcp.Config) World {
	return World(transporttest.LocalWorld(func(ctx context.Context, n int) ([]*tcp.Transport, error) {
		return tcp.Local(ctx, n, cfg)
	}))
}

// ShmWorld is a World of n ranks in this process over shared memory.
func ShmWorld(t testing.TB, n int) []transport.Transport { return ShmWorldWith(shm.Config{})(t, n) }

// ShmWorldWith is ShmWorld with cfg (its Rank and Size are ignored).
func ShmWorldWith(cfg shm.Config) World {
	return World(transporttest.LocalWorld(func(ctx context.Context, n int) ([]*shm.Transport, error) {
		return shm.Local(ctx, n, cfg)
	}))
}

// Native is the AllReduceFunc of a transport's native all-reduce
// (transport.NativeAllReducer); it fails on transports without one.
func Native(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, ok := t.(transport.NativeAllReducer)
	if !ok {
		return fmt.Errorf("algotest: %T has no native all-reduce", t)
	}
	return n.AllReduce(ctx, h, send, recv)
}

// RDMAWorld is a World of n ranks in this process over the UCX transport,
// with the UCX transports $UCX_TLS selects (tcp, sm, ...). It needs the rdma
// build tag; without it the test fails with rdma.ErrNotBuilt.
func RDMAWorld(t testing.TB, n int) []transport.Transport {
	return transporttest.LocalWorld(func(ctx context.Context, n int) ([]*rdma.Transport, error) {
		return rdma.Local(ctx, n, rdma.Config{})
	})(t, n)
}

// RDMAOptions narrows the table for RDMAWorld, which CI runs twice (UCX over
// tcp and over shared memory) under the race detector: odd and even world
// sizes, counts from empty to many segments, a float, an integer and a
// 16-bit type, and operators of each kind.
var RDMAOptions = Options{
	Sizes:  []int{1, 2, 3, 5, 8},
	Counts: []int{0, 1, 7, 1000, 65537},
	DTypes: []reduce.DType{reduce.Float32, reduce.Int64, reduce.BFloat16},
	Ops:    []reduce.Op{reduce.Sum, reduce.Prod, reduce.Max, reduce.Avg},
}
