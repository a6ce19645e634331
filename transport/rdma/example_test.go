//go:build rdma

package rdma_test

import (
	"context"
	"fmt"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/rdma"
)

// Two ranks in one process, each with its own UCX worker, exchange a
// message.
func ExampleLocal() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := rdma.Local(ctx, 2, rdma.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ts[0].Close()
	defer ts[1].Close()
	h := transport.Header{Seq: 1, Coll: transport.CollSendRecv, Root: -1}
	sent := make(chan error, 1)
	go func() { sent <- ts[0].Send(ctx, 1, h, []byte("hello over UCX")) }()
	buf := make([]byte, 14)
	if err := ts[1].Recv(ctx, 0, h, buf); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(buf), <-sent)
	// Output: hello over UCX <nil>
}
