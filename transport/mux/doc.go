// Package mux lets several communicators share one transport's connections
// and run at the same time. Each communicator opens a view, a
// transport.Transport over a subset of the parent's ranks with its own rank
// numbering, identified by a communicator id that every member uses.
//
//	m := mux.New(parent)          // one per parent transport
//	world, _ := m.Open(0, []int{0, 1, 2, 3})
//	evens, _ := m.Open(7, []int{0, 2})  // on ranks 0 and 2 only
//	err := ring.AllReduce(ctx, evens, h, send, recv)
//
// Unlike transport/group, views demultiplex: one reader goroutine per peer
// reads every message from the parent, and routes it by communicator id to
// that view's queue for the sending rank. Views that share a pair of ranks
// may therefore run concurrently, each with its own order of messages.
//
// # Wire format and cost
//
// A message of a view is two parent messages: a fixed 48-byte envelope
// holding the view's header and communicator id, then the payload (omitted
// when empty). When the receiver is already waiting in Recv the payload is
// read straight into its buffer; otherwise it is buffered, without bound,
// until the view receives it. Once a Mux reads from a parent, everything
// else must reach that parent's peers through views: nothing may call the
// parent's Recv.
//
// # Errors and closing
//
// A parent error with a peer fails every view's pending and later receives
// from it. Closing a view fails its own calls with transport.ErrClosed and
// tells its members, whose receives from this rank then fail with
// transport.ErrPeerGone instead of waiting for their timeouts. Close on the
// Mux stops the readers; it does not close the parent.
package mux
