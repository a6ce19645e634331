// Package tree implements all-reduce over a double binary tree, the shape of
// NCCL's Tree algorithm: the buffer is cut in two halves, each half is reduced
// up one of two binary trees to its root and broadcast back down, in segments
// that move on as soon as they are ready, and both trees run at once.
//
// # Why
//
// A ring needs 2(n-1) steps, a tree 2*ceil(log2 n): for small and medium
// buffers on many ranks the tree finishes first. One binary tree alone wastes
// bandwidth: its leaves, half the ranks, send and receive the buffer once
// while the interior ranks move it three times. In two trees whose interior
// ranks are each other's leaves every rank does both jobs, once each, on half
// the buffer. The busiest rank then sends and receives about twice the buffer;
// the ring's 2(n-1)/n is the optimum, so the tree trades up to n/(n-1) in
// bandwidth for its shorter latency.
//
// # Use
//
// The algorithm is written only against transport.Transport and runs over any
// transport:
//
//	h := transport.Header{Seq: seq, Coll: transport.CollAllReduce, Count: n, DType: reduce.Float32, Op: reduce.Sum}
//	err := tree.AllReduce(ctx, t, h, send, recv)
//
// Config tunes the segment size and the one-goroutine path; its zero value is
// what AllReduce uses. send and recv may be the same slice; send is otherwise
// never written. Avg is a sum finished (divided by n once) at each root.
//
// # The trees
//
// Tree 0 is the in-order binary tree over the ranks. Rank 0 is the root and
// its only child is the largest power of two below n. A rank r > 0 whose
// lowest set bit is b sits at height log2(b) and has the children r-b/2 and
// r+b/2; where r+b/2 >= n the right subtree is cut off and its first rank
// below n, r+b/4, r+b/8, ..., r+1, takes its place. The odd ranks are the
// leaves. Tree 1 is tree 0 with every rank r replaced by n-1-r when n is even,
// which swaps odd and even: every rank is interior in exactly one tree. For
// odd n that mirror would map even ranks to even ones, so tree 1 shifts
// instead: rank r takes the place of rank r-1 (mod n). Then every rank is
// interior in one tree except rank 0, which is interior in both (the root of
// tree 0 with one child, and the place of n-1 in tree 1). For 8 ranks:
//
//	    tree 0                  tree 1
//	      0                       7
//	      |                       |
//	      4                       3
//	   /     \                 /     \
//	  2       6               1       5
//	 / \     / \             / \     / \
//	1   3   5   7           0   2   4   6
//
// For 5 ranks tree 0 is 0-4-2 with 1 and 3 under 2, and tree 1 is 1-0-3 with
// 2 and 4 under 3. Each rank has at most one parent and two children per
// tree, and both trees have height ceil(log2 n).
//
// # Halves, segments and steps
//
// Tree 0 reduces the first ceil(count/2) elements, tree 1 the others. Each
// half is cut into segments of Config.SegmentBytes. A rank receives segment k
// from its children and reduces it with its own input while its parent still
// receives segment k-1 from it; the root finishes it and sends it down; every
// rank forwards it to its children as soon as it arrives. Header.Step is the
// tree and phase in the top two bits and the segment number below, so the
// two trees' and phases' messages can never be taken for each other, and a
// lost message fails the header check of the next one.
//
// # Order of messages on a link both trees use
//
// The transport keeps messages between two ranks in order, and allows one
// Send and one Recv per peer in flight. The trees cannot always avoid
// sharing links: with 2 ranks the link from rank 0 to rank 1 carries tree 1's
// reduce and tree 0's broadcast; with 8 ranks (above) the link 1->2 carries
// tree 0's reduce and tree 1's broadcast. So on every directed link both
// trees use, their messages take turns in an order both ends compute alone,
// from the hop at which each message would leave if every hop took one unit
// of time:
//
//   - A reduce message leaves a rank when it has heard from all its
//     children: at the rank's height (0 at the leaves).
//   - A broadcast message to a rank at depth d leaves its parent at hop
//     h+d-1, h being the trees' height.
//
// Segment by segment, the message that leaves at the earlier hop goes first,
// tree 0's on a tie; after the last segment of the shorter half the longer
// half's go alone. A gate per shared link makes the two trees' goroutines
// take turns in that order. Agreeing on an order is enough for each Recv to
// match its message, but not for progress: a message waits for its inputs
// and for the messages ahead of it on its link. With 2 ranks, if tree 0's
// broadcast went first on 0->1 and tree 1's broadcast first on 1->0, tree
// 0's broadcast would wait for tree 0's reduce, queued on 1->0 behind tree
// 1's broadcast, which waits for tree 1's reduce, queued on 0->1 behind tree
// 0's broadcast. The hop order rules such cycles out. Number all messages by
// (segment, hop, tree, sender, receiver): every goroutine handles its
// messages in increasing order, a message's inputs left at earlier hops, and
// a gate holds a message only behind smaller ones of its link. So the
// smallest unfinished message always has its sender and its receiver at it,
// and the collective finishes even if every Send waits for its Recv.
//
// # Goroutines
//
// Each tree has up to four goroutines on a rank: reduce from the children,
// send to the parent, receive from the parent, send to the children, linked
// by counters of finished segments. Their staging buffers come from a pool,
// so a segment allocates nothing.
//
// Buffers of at most Config.EagerBytes run on one goroutine instead, over
// transports that buffer twice the buffer (transport.Buffered): a goroutine
// hand-off per message costs more than overlapping saves there. That path
// takes each segment's messages in hop order, sends of a hop after the
// receives they need and before the receives of later hops, which puts the
// same messages on every link in the same order as the goroutines do, so
// ranks that choose differently still agree.
//
// # Errors
//
// An error names the tree, phase and segment, and wraps the transport's
// *transport.PeerError. The first error cancels the rank's other goroutines,
// and AllReduce returns only after all of them have stopped. The caller then
// closes the transport, as collkit.Comm does after a failed collective; that
// is what fails the operations of ranks waiting for this one.
package tree
