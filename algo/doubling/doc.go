// Package doubling implements the rooted collectives (Broadcast, Reduce,
// Gather, Scatter) on the recursive-doubling pattern, so that every rank
// returns only after it has heard, directly or through others, from every
// rank, with a header equal to its own.
//
// In round k rank r exchanges one message with rank r XOR 2^k, whatever the
// root: the partner on the root's side of the pair sends the data (the
// root's buffer, a partial reduction, a block of a gather or scatter) and
// the other sends a message of header only, or both send header only when
// neither has data for the other. The data moves as on a binomial tree in
// the same ceil(log2 n) rounds for a power of two, but the messages going
// the other way mean that the root of a broadcast or scatter, and the
// leaves of a reduce or gather, also hear from every rank before they
// return. Because the pairing does not depend on the root, ranks that
// disagree on it (or on the count, dtype, op or collective) still meet
// their partners in every round: one of each such pair gets a
// *transport.MismatchError, and the others its abort notice, at that call,
// instead of one rank returning a result and another waiting for a message
// that never comes.
//
// For n not a power of two, with p the largest power of two below n, the
// first 2(n-p) ranks pair up (2i, 2i+1): the even one hands its part to
// the odd one before the rounds (fold) and gets its share back after them
// (unfold), which adds two rounds.
//
//	h := transport.Header{Seq: seq, Coll: transport.CollBroadcast, DType: reduce.Float32, Count: count}
//	err := doubling.Broadcast(ctx, t, h, buf, root)
//
// The algorithms are written only against transport.Transport.
package doubling
