package collkit_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/mem"
)

// halfInput is rank r's element i: a multiple of 1/4 in [-2, 2], so that
// every partial sum of up to 8 ranks, and its quotient by a power of two,
// is exact in float16 and bfloat16 and the expectations are exact too.
func halfInput(r, i int) float32 { return float32((i*7+r*3)%17-8) / 4 }

// halfExpect is the exact all-reduce of halfInput over n ranks.
func halfExpect(op collkit.Op, n, i int) float32 {
	acc := halfInput(0, i)
	for r := 1; r < n; r++ {
		x := halfInput(r, i)
		switch op {
		case collkit.Sum, collkit.Avg:
			acc += x
		case collkit.Min:
			acc = min(acc, x)
		case collkit.Max:
			acc = max(acc, x)
		}
	}
	if op == collkit.Avg {
		acc /= float32(n)
	}
	return acc
}

func TestHalfAllReduceTyped(t *testing.T) {
	for _, n := range []int{4, 5} {
		for _, algo := range []string{"ring", "tree", "halvingdoubling", "native"} {
			ops := []collkit.Op{collkit.Sum, collkit.Min, collkit.Max}
			if n&(n-1) == 0 {
				ops = append(ops, collkit.Avg) // exact: a division by a power of two
			}
			t.Run(fmt.Sprintf("ranks=%d/algo=%s", n, algo), func(t *testing.T) {
				cs, _ := comms(t, n, mem.Config{}, collkit.Options{Algorithm: algo})
				for _, op := range ops {
					for _, count := range []int{0, 1, 7, 1000} {
						checkHalfAllReduce(t, cs, op, count, collkit.ToF16)
						checkHalfAllReduce(t, cs, op, count, collkit.ToBF16)
					}
				}
			})
		}
	}
}

// checkHalfAllReduce runs a typed all-reduce of []T on every rank and
// compares every element's bits with the exact result rounded by to.
func checkHalfAllReduce[T interface {
	collkit.F16 | collkit.BF16
	Float32() float32
}](t *testing.T, cs []*collkit.Comm, op collkit.Op, count int, to func(float32) T) {
	t.Helper()
	n := len(cs)
	errs := each(cs, func(r int, c *collkit.Comm) error {
		send, recv := make([]T, count), make([]T, count)
		for i := range send {
			send[i] = to(halfInput(r, i))
		}
		if err := collkit.AllReduce(context.Background(), c, send, recv, op); err != nil {
			return err
		}
		for i, got := range recv {
			if want := to(halfExpect(op, n, i)); got != want {
				return fmt.Errorf("rank %d: %T %v of %d elements: element %d = %v (%#04x), want %v (%#04x)",
					r, got, op, count, i, got, uint16(got), want, uint16(want))
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The other typed collectives take F16 and BF16 as well.
func TestHalfCollectivesTyped(t *testing.T) {
	cs, _ := comms(t, 3, mem.Config{}, collkit.Options{})
	errs := each(cs, func(r int, c *collkit.Comm) error {
		ctx := context.Background()
		params := make([]collkit.BF16, 2)
		if r == 1 {
			params = []collkit.BF16{collkit.ToBF16(0.5), collkit.ToBF16(-3)}
		}
		if err := collkit.Broadcast(ctx, c, params, 1); err != nil {
			return err
		}
		all := make([]collkit.F16, 3)
		if err := collkit.AllGather(ctx, c, []collkit.F16{collkit.ToF16(float32(r) + 0.5)}, all); err != nil {
			return err
		}
		g := c.Group()
		fused := []collkit.F16{collkit.ToF16(1.25)}
		collkit.GroupAllReduce(g, fused, fused, collkit.Sum)
		if err := g.Run(ctx); err != nil {
			return err
		}
		if got := fmt.Sprint(params, all, fused); got != "[0.5 -3] [0.5 1.5 2.5] [3.75]" {
			return fmt.Errorf("rank %d: broadcast, all-gather, group: %s", r, got)
		}
		if !slices.Equal(all, []collkit.F16{0x3800, 0x3e00, 0x4100}) {
			return fmt.Errorf("rank %d: all-gather bits %#04x", r, all)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
