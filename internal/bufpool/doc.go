// Package bufpool lends the byte buffers that outlive one call (staging
// segments, scratch space, message copies, fusion buffers) to every package
// of collkit, from github.com/valyala/bytebufferpool pools, one per
// power-of-two size class: a steady stream of collectives of one shape gets
// the same buffers back and allocates nothing once the pools are warm.
//
// Get a buffer of n bytes, use its B, give it back with Put:
//
//	b := bufpool.Get(seg)
//	defer bufpool.Put(b)
//	t.Recv(ctx, peer, h, b.B)
//
// Like sync.Pool, which is under both bytebufferpool and the classes above
// it, the pools drop what they hold when the garbage collector runs twice
// without the buffers being used; a program that allocates nothing else
// keeps them.
//
// bytebufferpool counts the sizes it is given, for its calibration, with an
// atomic add that the cores share: a Get and Put costs about 30 ns on two
// cores at once against about 15 ns for a bare sync.Pool (BenchmarkGetPut).
// That is invisible where it is paid most often, a message copy of
// transport/mem: a 1 KiB Send and Recv took 336 ns against 328 ns with the
// hand-rolled pool it replaced (medians of 10 alternating runs on the
// shared 2-core machine, load 5), so no user keeps a pool of its own.
package bufpool
