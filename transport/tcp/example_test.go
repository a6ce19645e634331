package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/tcp"
)

// Two ranks in one process meet through a MemStore and exchange a message
// over loopback TCP.
func Example() {
	store := bootstrap.NewMemStore()
	ctx := context.Background()
	ts := make([]*tcp.Transport, 2)
	for r := range ts {
		t, err := tcp.New(tcp.Config{Rank: r, Size: 2, JobID: "example"})
		if err != nil {
			panic(err)
		}
		defer t.Close()
		ts[r] = t
	}
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() {
			if err := t.Connect(ctx, store); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()

	// A message this small fits in the socket buffer, so Send returns
	// before anyone receives it; a large one would need the Recv running on
	// another goroutine.
	h := transport.Header{Seq: 1, Coll: transport.CollSendRecv}
	if err := ts[0].Send(ctx, 1, h, []byte("hello over tcp")); err != nil {
		panic(err)
	}
	buf := make([]byte, len("hello over tcp"))
	if err := ts[1].Recv(ctx, 0, h, buf); err != nil {
		panic(err)
	}
	fmt.Printf("rank 1 got %q from rank 0\n", buf)

	// Expecting another step than the one sent is caught, not misread.
	if err := ts[0].Send(ctx, 1, h, []byte("step 0")); err != nil {
		panic(err)
	}
	h.Step = 1
	err := ts[1].Recv(ctx, 0, h, make([]byte, 6))
	fmt.Println(errors.Is(err, transport.ErrMismatch))
	// Output:
	// rank 1 got "hello over tcp" from rank 0
	// true
}
