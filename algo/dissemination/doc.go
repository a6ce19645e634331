// Package dissemination runs collectives on the dissemination pattern: in
// round k (k = 0, 1, ..., ceil(log2 n) - 1) rank r sends one message to
// r+2^k and receives one from r-2^k, mod n. After the last round every rank
// has heard, directly or through others, from every rank.
//
// Barrier sends empty messages: no rank leaves before all have entered.
// Agree sends a collective's own header, so that a collective that would
// finish without hearing from every rank (an empty buffer, a pipelined
// broadcast's root) first learns that every rank called it with the same
// count, dtype, op and root; ranks that did not get a
// *transport.MismatchError, or the abort notice of a peer that did.
//
// Broadcast, Reduce, Gather and Scatter move their data as on a binomial
// tree, in the same ceil(log2 n) rounds, over the pattern's messages; the
// messages that carry no data carry the header. AllGather and AllToAll are
// Bruck's algorithms on the pattern, and ReduceScatter is Bruck's
// all-to-all that reduces the blocks bound for one rank as they meet:
// every message carries data, ceil(log2 n) rounds where the ring and the
// pairwise exchange take n-1 steps. So every rank, the root of a broadcast
// and the leaves of a reduce included, returns only after it
// has heard from every rank with a header equal to its own. The pattern
// does not depend on the root or the count, and its first round (send to
// r+1, receive from r-1) is the first step of the ring and pairwise
// algorithms too: ranks that disagree on the root, count, dtype, op or
// collective still meet each other's messages, and one of them sees the
// mismatch at once, instead of one rank returning a result while another
// waits for a message that never comes.
//
//	err := dissemination.Barrier(ctx, t, transport.Header{Seq: seq, Coll: transport.CollBarrier, Root: -1})
//	err = dissemination.Broadcast(ctx, t, transport.Header{Seq: seq + 1, Coll: transport.CollBroadcast, DType: reduce.Float32, Count: 4}, buf, root)
//
// The algorithms are written only against transport.Transport.
package dissemination
