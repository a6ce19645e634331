package transport

import (
	"context"

	"github.com/collkit/collkit/reduce"
)

// NativeCollectives is implemented by transports whose library runs whole
// collectives itself (NCCL). A communicator finds it by type assertion and
// hands the collective over instead of running an algorithm over Send and
// Recv. Buffers are host memory; counts and roots follow the same rules as
// collkit's own collectives: send and recv have the same length for
// AllReduce, Broadcast and Reduce (recv is only written on the root for
// Reduce); recv is Size() times send for AllGather and send is Size() times
// recv for ReduceScatter. Every rank calls the same collectives in the same
// order.
type NativeCollectives interface {
	AllReduce(ctx context.Context, dt reduce.DType, op reduce.Op, send, recv []byte) error
	Broadcast(ctx context.Context, dt reduce.DType, root int, send, recv []byte) error
	Reduce(ctx context.Context, dt reduce.DType, op reduce.Op, root int, send, recv []byte) error
	AllGather(ctx context.Context, dt reduce.DType, send, recv []byte) error
	ReduceScatter(ctx context.Context, dt reduce.DType, op reduce.Op, send, recv []byte) error
}
