// Package ring implements ring all-reduce: a reduce-scatter followed by an
// all-gather around the ranks in rank order, each pipelined in segments so
// that sending, receiving and reducing overlap.
//
// Every rank sends and receives (n-1)/n of the buffer twice, which is the
// bandwidth optimum; the price is 2(n-1) latency steps, so small messages are
// better served by tree or recursive-doubling algorithms.
//
// The package also has the ring's other collectives: ReduceScatter,
// AllGather, and pipelined chains for Broadcast and Reduce (the chain run
// backwards, each rank reducing what it passes on).
//
// The algorithm is written only against transport.Transport and runs over any
// transport:
//
//	h := transport.Header{Seq: seq, Coll: transport.CollAllReduce, Count: n, DType: reduce.Float32, Op: reduce.Sum}
//	err := ring.AllReduce(ctx, t, h, send, recv)
package ring
