// Package pairwise implements all-to-all by pairwise exchange: in step s of
// n, rank r and rank s-r (mod n) swap their blocks for each other, and the
// rank that would pair with itself sits the step out. Every link carries
// one block each way, every rank exchanges in all steps but one, and no
// rank is a hot spot; in place, a rank needs one block of staging space.
//
//	h := transport.Header{Seq: seq, Coll: transport.CollAllToAll, DType: reduce.Float32, Count: total}
//	err := pairwise.AllToAll(ctx, t, h, send, recv)
//
// The algorithm is written only against transport.Transport.
package pairwise
