package collkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/transport"
)

// With dp=2, tp=2, pp=2 on 8 ranks, each group's all-reduce sums exactly
// its members, while all three groups and the world communicator run at
// the same time on every rank.
func TestMesh(t *testing.T) {
	for name, world := range map[string]algotest.World{"mem": algotest.MemWorld, "tcp": algotest.TCPWorld} {
		t.Run(name, func(t *testing.T) {
			const dp, tp, pp = 2, 2, 2
			cs := newComms(t, world(t, 8))
			// Expected members from the layout rank = (p*dp + d)*tp + t.
			coords := func(r int) (d, tt, p int) { return r / tp % dp, r % tp, r / (tp * dp) }
			members := func(r int, same func(a, b int) bool) int64 {
				var mask int64
				for q := range 8 {
					if same(r, q) {
						mask |= 1 << q
					}
				}
				return mask
			}
			sameTP := func(a, b int) bool { da, _, pa := coords(a); db, _, pb := coords(b); return da == db && pa == pb }
			sameDP := func(a, b int) bool { _, ta, pa := coords(a); _, tb, pb := coords(b); return ta == tb && pa == pb }
			samePP := func(a, b int) bool { da, ta, _ := coords(a); db, tb, _ := coords(b); return da == db && ta == tb }
			err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
				m, err := c.Mesh(ctx, dp, tp, pp)
				if err != nil {
					return err
				}
				defer m.Close()
				d, tt, p := coords(r)
				if m.DPRank != d || m.TPRank != tt || m.PPRank != p || m.DP.Rank() != d || m.TP.Rank() != tt || m.PP.Rank() != p {
					return fmt.Errorf("coordinates dp %d/%d tp %d/%d pp %d/%d, want %d %d %d",
						m.DPRank, m.DP.Rank(), m.TPRank, m.TP.Rank(), m.PPRank, m.PP.Rank(), d, tt, p)
				}
				groups := []struct {
					name string
					c    *Comm
					want int64
				}{
					{"dp", m.DP, members(r, sameDP)},
					{"tp", m.TP, members(r, sameTP)},
					{"pp", m.PP, members(r, samePP)},
					{"world", c, 0xFF},
				}
				errs := make([]error, len(groups))
				var wg sync.WaitGroup
				for i, g := range groups {
					wg.Go(func() {
						for it := range 20 {
							count := []int{1, 1000, 50000}[it%3]
							x := make([]int64, count)
							for j := range x {
								x[j] = 1<<r + int64(j)*int64(g.c.Size())
							}
							if err := AllReduce(ctx, g.c, x, x, Sum); err != nil {
								errs[i] = fmt.Errorf("%s group: %w", g.name, err)
								return
							}
							for j, v := range x {
								if want := g.want + int64(j)*int64(g.c.Size()*g.c.Size()); v != want {
									errs[i] = fmt.Errorf("%s group, iteration %d: element %d is %#x, want %#x (the sum of exactly the members)", g.name, it, j, v, want)
									return
								}
							}
						}
					})
				}
				wg.Wait()
				return errors.Join(errs...)
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Split orders by key, leaves out NoColor ranks, nests, and a closed
// sub-communicator fails its peers instead of hanging them.
func TestSplit(t *testing.T) {
	cs := newComms(t, algotest.MemWorld(t, 5))
	err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
		color := r % 2
		if r == 4 {
			color = NoColor
		}
		sub, err := c.Split(ctx, color, -r) // reversed order
		if err != nil {
			return err
		}
		if r == 4 {
			if sub != nil {
				return fmt.Errorf("NoColor rank got a communicator")
			}
			return c.Barrier(ctx) // the world still works
		}
		defer sub.Close()
		// Evens {0, 2} -> ranks 2, 0 reversed; odds {1, 3} likewise.
		wantRank := map[int]int{0: 1, 2: 0, 1: 1, 3: 0}[r]
		if sub.Size() != 2 || sub.Rank() != wantRank {
			return fmt.Errorf("sub-communicator rank %d of %d, want %d of 2", sub.Rank(), sub.Size(), wantRank)
		}
		x := []int32{int32(r)}
		if err := Broadcast(ctx, sub, x, 0); err != nil {
			return err
		}
		if want := int32(map[int]int{0: 2, 2: 2, 1: 3, 3: 3}[r]); x[0] != want {
			return fmt.Errorf("broadcast from sub rank 0 gave %d, want %d", x[0], want)
		}
		// Nested: each pair splits into singletons.
		single, err := sub.Split(ctx, sub.Rank(), 0)
		if err != nil {
			return err
		}
		defer single.Close()
		if single.Size() != 1 {
			return fmt.Errorf("nested split has %d ranks, want 1", single.Size())
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// Rank 0 closes its sub-communicator; rank 2 must hear of it.
		switch r {
		case 0:
			sub.Close()
		case 2:
			err := sub.Barrier(ctx)
			if !errors.Is(err, transport.ErrPeerGone) {
				return fmt.Errorf("barrier with a closed peer: got %v, want ErrPeerGone", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMeshBadSizes(t *testing.T) {
	cs := newComms(t, algotest.MemWorld(t, 1))
	if _, err := cs[0].Mesh(context.Background(), 2, 1, 1); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("got %v, want ErrBadArgument", err)
	}
}
