package mem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func Example() {
	n := mem.NewNetwork(2, mem.Config{})
	defer n.Close()
	ts := n.Transports()
	ctx := context.Background()
	h := transport.Header{Seq: 1, Coll: transport.CollSendRecv}

	// A mem Send never waits for its receiver, so one goroutine can do both.
	if err := ts[0].Send(ctx, 1, h, []byte("hello")); err != nil {
		fmt.Println(err)
		return
	}
	buf := make([]byte, 5)
	if err := ts[1].Recv(ctx, 0, h, buf); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank 1 got %q\n", buf)

	// Pull the cable: both ends now fail instead of waiting.
	n.Cut(0, 1)
	err := ts[1].Recv(ctx, 0, h, buf)
	fmt.Println(errors.Is(err, transport.ErrPeerGone))
	fmt.Println(err)
	// Output:
	// rank 1 got "hello"
	// true
	// recv rank 0: mem: link 0<->1 was cut: peer connection lost
}

func ExampleConfig() {
	// Lose about a third of the messages: seed 1 loses the same ones on
	// every run.
	n := mem.NewNetwork(2, mem.Config{Seed: 1, Drop: 0.3})
	defer n.Close()
	ts := n.Transports()
	h := transport.Header{Seq: 1, Coll: transport.CollSendRecv}
	for i := range 10 {
		ts[0].Send(context.Background(), 1, h, []byte{byte(i)})
	}
	// A lost message is noticed only by a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var got []byte
	b := []byte{0}
	for ts[1].Recv(ctx, 0, h, b) == nil {
		got = append(got, b[0])
	}
	fmt.Println(got)
	// Output:
	// [0 1 2 3 4 7 8 9]
}
