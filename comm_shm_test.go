package collkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/shm"
)

// Over shared memory a communicator runs the native all-reduce unless told
// otherwise; elsewhere "native" is the ring.
func TestNativeByDefaultOverShm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := shm.Local(ctx, 3, shm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var cs []*collkit.Comm
	for _, tr := range ts {
		c, err := collkit.New(tr, collkit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if c.Algorithm() != "native" {
			t.Errorf("rank %d: algorithm %q over shm, want native", c.Rank(), c.Algorithm())
		}
		cs = append(cs, c)
	}
	check := func(cs []*collkit.Comm) {
		t.Helper()
		errs := each(cs, func(r int, c *collkit.Comm) error {
			send := []float64{float64(r), 1.5, -float64(r)}
			recv := make([]float64, 3)
			if err := collkit.AllReduce(ctx, c, send, recv, collkit.Sum); err != nil {
				return err
			}
			if recv[0] != 3 || recv[1] != 4.5 || recv[2] != -3 {
				t.Errorf("rank %d: sum = %v, want [3 4.5 -3]", r, recv)
			}
			return nil
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	check(cs)
	onMem, _ := comms(t, 3, mem.Config{}, collkit.Options{Algorithm: "native"})
	check(onMem)
}

// Over a transport with its own all-reduce, adaptive counts it among its
// candidates: over shm the built-in table measured it fastest for small
// buffers, so an 8-byte all-reduce runs it, exactly, and the statistics
// say so. Without one (mem) adaptive never names it.
func TestAdaptiveChoosesNativeOverShm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	ts, err := shm.Local(ctx, n, shm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*collkit.Comm, n)
	for r, tr := range ts {
		if cs[r], err = collkit.New(tr, collkit.Options{Algorithm: "adaptive", Transport: "shm"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs[r].Close() })
	}
	if got := cs[0].Choose(8); got != "native" {
		t.Fatalf("adaptive over shm chose %s for 8 bytes, want native", got)
	}
	errs := each(cs, func(r int, c *collkit.Comm) error {
		send := []float32{float32(r), 2}
		recv := make([]float32, 2)
		if err := collkit.AllReduce(ctx, c, send, recv, collkit.Sum); err != nil {
			return err
		}
		if recv[0] != 3 || recv[1] != 6 {
			t.Errorf("rank %d: sum = %v, want [3 6]", r, recv)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range cs {
		stats := c.Stats()
		if len(stats) != 1 || stats[0].Algorithm != "native" {
			t.Errorf("rank %d: statistics %+v, want one row, native", r, stats)
		}
	}
	onMem, _ := comms(t, n, mem.Config{}, collkit.Options{Algorithm: "adaptive", Transport: "shm"})
	for size := int64(8); size <= 16<<20; size *= 8 {
		if got := onMem[0].Choose(size); got == "native" {
			t.Errorf("adaptive over mem chose native for %d bytes: mem has no all-reduce of its own", size)
		}
	}
}
