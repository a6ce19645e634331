package nccl_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
)

// A one-rank all-reduce on the first GPU. Without NCCL it prints why.
// (No Output: the result depends on the machine.)
func Example() {
	t, err := nccl.New(nccl.Config{Rank: 0, Size: 1})
	if errors.Is(err, nccl.ErrNotAvailable) {
		fmt.Println(err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	ctx := context.Background()
	if err := t.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		fmt.Println(err)
		return
	}
	send := []byte{1, 2, 3, 4}
	recv := make([]byte, len(send))
	h := transport.Header{Count: uint64(len(send)), DType: reduce.Uint8, Op: reduce.Sum}
	if err := t.AllReduce(ctx, h, send, recv); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(recv)
}
