// Package halvingdoubling implements all-reduce in log2(n) steps: recursive
// doubling for small buffers and Rabenseifner's algorithm (a reduce-scatter by
// recursive halving followed by an all-gather by recursive doubling) for large
// ones, as Gloo's halving-doubling and Open MPI's tuned all-reduce do.
//
// # Which sub-algorithm runs
//
// Buffers of at most Config.DoublingMaxBytes (32 KiB by default, 256 KiB on 2
// and 3 ranks) use recursive doubling: in round k every rank exchanges its
// whole partial result with the rank whose number differs in bit k, and
// reduces. That is log2(n) steps, the latency optimum, but each step moves
// the whole buffer; with two ranks in the power-of-two group that is no more
// than Rabenseifner moves in its two steps.
//
// Larger buffers use Rabenseifner's algorithm. In round k of the
// reduce-scatter each rank sends half of its current range to the partner
// differing in bit k and reduces the half it keeps; after log2(n) rounds each
// rank holds one fully reduced block. The all-gather retraces the rounds
// backwards, doubling the range each time. Each rank sends about 2(n-1)/n of
// the buffer, as a ring does, in 2 log2(n) steps instead of 2(n-1). Transfers
// are cut into Config.SegmentBytes segments; while one goroutine receives and
// reduces, a helper sends the other direction of the exchange. Buffers of at
// most Config.EagerBytes over a transport.Buffered transport that holds them
// run every exchange as send-then-receive on the caller's goroutine instead.
//
// # World sizes that are not powers of two
//
// With p the largest power of two <= n and r = n - p, ranks 0..2r-1 fold in
// pairs first: each even rank 2i sends its input to rank 2i+1, which reduces
// the two and stands for both in the power-of-two algorithm; the even rank
// sits out and at the end receives the result from rank 2i+1. The p ranks
// that remain are numbered 0..p-1 in rank order:
//
//	group rank v < r   is rank 2v+1  (holding ranks 2v and 2v+1)
//	group rank v >= r  is rank v+r
//
// For example with n = 6 (p = 4, r = 2): 0 -> 1, 2 -> 3, and group ranks
// 0, 1, 2, 3 are ranks 1, 3, 4, 5. The fold and unfold each cost one extra
// transfer of the whole buffer on the folded pairs, so for large buffers on
// such world sizes package ring, which moves 2(n-1)/n of the buffer whatever
// n is, is usually faster over sockets.
//
// # Same bits on every rank
//
// Both sub-algorithms evaluate the same reduction tree over the group ranks,
// ((x0 op x1) op (x2 op x3)) op ..., with the fold's pairs as leaves, and
// every reduction puts the data of the lower ranks on the left. So
// floating-point results are bit-identical on every rank, and neither the
// sub-algorithm the message size picks nor the segment size changes them. Avg
// is summed, then divided by n once per element on the fully reduced data.
//
// The algorithm is written only against transport.Transport and runs over any
// transport:
//
//	h := transport.Header{Seq: seq, Coll: transport.CollAllReduce, Count: n, DType: reduce.Float32, Op: reduce.Sum}
//	err := halvingdoubling.AllReduce(ctx, t, h, send, recv)
package halvingdoubling
