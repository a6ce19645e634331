// Package group is a transport.Transport over a subset of another
// transport's ranks: a sub-communicator that shares the parent's
// connections. Algorithms that work in levels (algo/hierarchical) run an
// ordinary algorithm over a group of the ranks on one node, or of one rank
// per node, without new connections.
//
//	// Parent ranks 4, 1 and 2 become group ranks 0, 1 and 2.
//	g, err := group.New(parent, []int{4, 1, 2}, 7)
//	err = ring.AllReduce(ctx, g, h, send, recv)
//
// Every member builds the group with the same ranks and the same comm id.
// Send and Recv translate the group peer to its parent rank and mark every
// message with the comm id: the Comm field on the wire is the caller's
// h.Comm XOR comm. The caller's Comm is thus still checked end to end, and a
// message of another group, or of the parent's own traffic, on the same
// connection fails the receiver's header check as a mismatch instead of
// being read as this group's. Errors name the group peer and, in the
// PeerError's Addr, the parent rank (and the parent's address, if any);
// mismatch errors are reported in the caller's terms.
//
// # Limits
//
// Groups do not demultiplex: a connection between two parent ranks carries
// one FIFO of messages. Groups that share a pair of parent ranks, or a group
// and its parent's own traffic between the same pair, must not run
// concurrently; run them one after the other (the comm ids then catch a rank
// that ran them in a different order). Groups with no pair in common, such as
// the groups of different nodes, may run at once. Sub-communicators that
// must run concurrently over shared pairs use transport/mux instead, which
// demultiplexes by communicator id.
//
// Close is local: it fails this rank's pending and later group calls with
// transport.ErrClosed but leaves the parent open, so peers learn about it
// only when the parent itself closes or their contexts end.
//
// A group forwards transport.Buffered: SendBuffer is the parent's, or zero,
// promising nothing, when the parent does not buffer.
package group
