// Package hierarchical implements a two-level all-reduce in the style of
// Horovod: ranks that share a node reduce among themselves over the fast
// local links, and only 1/L of the data per rank crosses the network, where L
// is the number of ranks per node.
//
// With N nodes of L ranks each (here N = 2, L = 3), the buffer is cut into L
// shards, a to c, that differ in size by at most one element:
//
//	            node 0                        node 1
//	  rank 0    rank 1    rank 2    rank 3    rank 4    rank 5
//	 [a b c]   [a b c]   [a b c]   [a b c]   [a b c]   [a b c]
//
//	1. intra-node reduce-scatter: local rank l gets shard l summed over its node
//	   [a . .]   [. b .]   [. . c]   [a . .]   [. b .]   [. . c]
//
//	2. inter-node all-reduce of each shard among the ranks holding it,
//	   all L shards at once (rank 0 with 3, 1 with 4, 2 with 5)
//	   [A . .]   [. B .]   [. . C]   [A . .]   [. B .]   [. . C]
//
//	3. intra-node all-gather: every rank gets every fully reduced shard
//	   [A B C]   [A B C]   [A B C]   [A B C]   [A B C]   [A B C]
//
// Nodes of different sizes cannot split the buffer alike, so there the ranks
// of each node all-reduce, the node leaders (the lowest rank of each node)
// all-reduce among themselves, and each leader broadcasts to its node. A
// single node, or one rank per node, is a flat all-reduce.
//
// Config.Nodes says which ranks share a node; GroupBy builds it from host
// names. Each level runs an ordinary algorithm (ring unless Config says
// otherwise) over a transport/group of the main transport, or over a
// transport given for the level, such as shared memory inside a node:
//
// An intra-node transport that runs collectives itself
// (transport.NativeCollectives: NCCL inside a node, TCP or RDMA between
// nodes) does the intra-node phases with its own collectives: reduce-scatter
// and all-gather when nodes are even and the count divides by their size,
// reduce to the leader and broadcast otherwise. They run even with one
// rank per node, so such a library always holds the node's part of the work.
//
//	c := hierarchical.Config{Nodes: hierarchical.GroupBy(hostnames)}
//	err := c.AllReduce(ctx, t, h, send, recv)
//
// The topology and the groups of each level are kept for the next call over
// the same transport (a small cache), so a steady stream of all-reduces
// builds them once and allocates nothing.
//
// The levels are summed and Avg is divided by the number of ranks once, at
// the end, so results have the same bits as a flat all-reduce's. Each level
// and phase marks its messages with its own communicator id and collective,
// so that no message of one phase passes for another's, and ranks that
// disagree on the operation (Avg against Sum included) or on Nodes get a
// mismatch error where their messages meet (a layout hash is part of the
// id). Like any disagreement between ranks, a different Nodes can also leave
// a rank waiting for a message that never comes, until its context ends.
package hierarchical
