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
package bufpool
