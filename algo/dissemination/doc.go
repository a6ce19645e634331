// Package dissemination implements a barrier by the dissemination
// algorithm: in round k (k = 0, 1, ...) rank r sends an empty message to
// r+2^k and waits for one from r-2^k. After ceil(log2 n) rounds every rank
// has heard, directly or through others, from every rank, so none leaves
// the barrier before all have entered it.
//
//	err := dissemination.Barrier(ctx, t, transport.Header{Seq: seq, Coll: transport.CollBarrier, Root: -1})
//
// Agree runs the same rounds with a collective's own header, so that a
// collective that would finish without hearing from every rank (an empty
// buffer, a pipelined broadcast's root) first learns that every rank
// called it with the same count, dtype, op and root; ranks that did not
// get a *transport.MismatchError, or the abort notice of a peer that did.
//
// The algorithm is written only against transport.Transport.
package dissemination
