package collkit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/verify"
)

// A group of mixed all-reduces (several dtypes and ops, sizes from zero
// up, in place and not), a broadcast and a two-way exchange with every
// other rank gives every result exactly, runs one all-reduce per dtype and
// op, and exchanges messages both ways without deadlocking.
func TestGroup(t *testing.T) {
	worlds := map[string]algotest.World{"mem": algotest.MemWorld, "tcp": algotest.TCPWorld}
	for name, world := range worlds {
		for _, n := range []int{1, 3, 4} {
			t.Run(fmt.Sprintf("%s/n=%d", name, n), func(t *testing.T) {
				cs := newComms(t, world(t, n))
				type ar struct {
					dt         DType
					op         Op
					seed       uint64
					send, recv []byte
				}
				const p2pBytes = 1 << 20 // past the socket buffers: needs concurrency
				err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
					g := c.Group()
					var ars []ar
					for i := range 60 {
						dt := []DType{Float32, Int64, BFloat16}[i%3]
						op := []Op{Sum, Max, Avg}[i/3%3]
						count := (i * 37) % 300
						send := algotest.Input(dt, op, count, uint64(100+i), r)
						recv := send
						if i%2 == 0 {
							recv = algotest.Poisoned(len(send))
						}
						ars = append(ars, ar{dt, op, uint64(100 + i), send, recv})
						g.AllReduce(dt, op, send, recv)
					}
					bc := algotest.Poisoned(1000)
					if r == n-1 {
						bc = algotest.Input(Uint8, Sum, 1000, 7, n-1)
					}
					g.Broadcast(Uint8, bc, n-1)
					a2a := algotest.Input(Int32, Sum, 2*n, 9, r)
					g.AllToAll(Int32, a2a, a2a)
					in := make([][]byte, n)
					for p := range n {
						if p != r {
							g.Send(Uint8, algotest.Input(Uint8, Sum, p2pBytes, uint64(1000+r*n+p), r), p)
							in[p] = algotest.Poisoned(p2pBytes)
							g.Recv(Uint8, in[p], p)
						}
					}
					seq := c.seq
					if err := g.Run(ctx); err != nil {
						return err
					}
					// 9 (dtype, op) pairs fused, the broadcast and the all-to-all.
					if got := c.seq - seq; n > 1 && got != 11 {
						return fmt.Errorf("group ran %d collectives, want 11 (9 fused all-reduces, a broadcast, an all-to-all)", got)
					}
					var wantA2A []byte
					for k := range n {
						wantA2A = append(wantA2A, algotest.Input(Int32, Sum, 2*n, 9, k)[r*8:(r+1)*8]...)
					}
					if err := wrong(Int32, a2a, wantA2A); err != nil {
						return fmt.Errorf("all-to-all: %w", err)
					}
					for i, a := range ars {
						want := make([]byte, len(a.send))
						verify.Expect(a.dt, a.op, want, a.seed, n)
						if err := wrong(a.dt, a.recv, want); err != nil {
							return fmt.Errorf("all-reduce %d (%v %v): %w", i, a.dt, a.op, err)
						}
					}
					if err := wrong(Uint8, bc, algotest.Input(Uint8, Sum, 1000, 7, n-1)); err != nil {
						return fmt.Errorf("broadcast: %w", err)
					}
					for p := range n {
						if p != r {
							if err := wrong(Uint8, in[p], algotest.Input(Uint8, Sum, p2pBytes, uint64(1000+p*n+r), p)); err != nil {
								return fmt.Errorf("recv from %d: %w", p, err)
							}
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// FusionBytes cuts a bucket where it would overflow, and a negative value
// turns fusion off.
func TestGroupFusionBytes(t *testing.T) {
	cs := newComms(t, algotest.MemWorld(t, 3))
	for _, tc := range []struct{ fusion, want int }{{0, 1}, {4000, 3}, {-1, 10}} {
		err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
			g := c.Group()
			g.FusionBytes = tc.fusion
			bufs := make([][]float32, 10)
			for i := range bufs {
				bufs[i] = make([]float32, 250) // 1000 bytes
				for j := range bufs[i] {
					bufs[i][j] = float32(r + i)
				}
				GroupAllReduce(g, bufs[i], bufs[i], Sum)
			}
			seq := c.seq
			if err := g.Run(ctx); err != nil {
				return err
			}
			if got := int(c.seq - seq); got != tc.want {
				return fmt.Errorf("FusionBytes %d: %d all-reduces ran, want %d", tc.fusion, got, tc.want)
			}
			for i, b := range bufs {
				for j, v := range b {
					if want := float32(3*i + 3); v != want {
						return fmt.Errorf("buffer %d element %d is %v, want %v", i, j, v, want)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestGroupBadArgument(t *testing.T) {
	cs := newComms(t, algotest.MemWorld(t, 2))
	g := cs[0].Group()
	g.AllReduce(Float32, Sum, make([]byte, 8), make([]byte, 4))
	g.Send(Float32, make([]byte, 4), 0)
	err := g.Run(context.Background())
	if !errors.Is(err, ErrBadArgument) {
		t.Fatalf("got %v, want an ErrBadArgument about the all-reduce's buffers", err)
	}
	if err := g.Run(context.Background()); err == nil {
		t.Fatal("a group ran twice")
	}
}
