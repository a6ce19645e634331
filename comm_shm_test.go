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
