// Package binomial implements rooted collectives on a binomial tree:
// Broadcast, Reduce, Gather and Scatter reach every rank in ceil(log2 n)
// rounds, which makes them the latency-optimal choice for small messages.
// For large messages the pipelined chain of algo/ring moves each byte over
// each link once and wins.
//
// Ranks are numbered relative to the root (v = (rank - root) mod n). In
// round k the ranks that already hold the data, v < 2^k, send to v + 2^k; a
// reduction or gather runs the same tree from the leaves up.
//
//	h := transport.Header{Seq: seq, Coll: transport.CollBroadcast, DType: reduce.Float32, Count: n}
//	err := binomial.Broadcast(ctx, t, h, buf, root)
//
// The algorithms are written only against transport.Transport.
package binomial
