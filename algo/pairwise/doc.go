// Package pairwise implements all-to-all and all-gather by pairwise
// exchange: in step s of n-1, rank r sends its block for rank r+s (for
// all-gather, its own block) and receives rank r-s's block. Every link
// carries one block each way, every rank sends and receives in every step,
// and no rank is a hot spot. Unlike a ring all-gather, no block waits for
// another to arrive before it leaves. AllReduce is two such rounds (a
// "two-shot" all-reduce): blocks to their owners, who reduce them, then the
// reduced blocks to every rank.
//
//	h := transport.Header{Seq: seq, Coll: transport.CollAllToAll, DType: reduce.Float32, Count: total}
//	err := pairwise.AllToAll(ctx, t, h, send, recv)
//
// The algorithm is written only against transport.Transport.
package pairwise
