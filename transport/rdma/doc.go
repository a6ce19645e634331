// Package rdma is collkit's RDMA transport, built on UCX's UCP API: the same
// code runs over InfiniBand or RoCE verbs where the machine has them and over
// UCX's TCP or shared-memory transports elsewhere (UCX_TLS=tcp, UCX_TLS=sm),
// which is how it is tested without RDMA hardware.
//
// It needs cgo, libucx-dev and the build tag rdma:
//
//	go build -tags rdma ./...
//
// Without the tag the package still compiles: New and Local return
// ErrNotBuilt ("built without RDMA support: rebuild with -tags rdma and
// libucx-dev installed"), and device discovery (Devices,
// DeviceForInterface, InterfaceForAddr, which need no cgo) works as ever.
//
//	t, err := rdma.New(rdma.Config{Rank: env.Rank, Size: env.Size, JobID: env.JobID,
//		Interface: ifname}) // ifname holds bootstrap.LocalAddrFor(env.StoreAddr())
//	err = t.Connect(ctx, store)
//	defer t.Close()
//
// # Setup
//
// Connect creates a UCX context (features TAG and WAKEUP) and one worker in
// thread mode SERIALIZED, publishes the worker's address under
// "rdma/addr/<rank>" in the bootstrap store, reads every other rank's and
// creates an endpoint to each, with error handling mode PEER where the
// transports support it (UCX 1.13's shared-memory transports do not). Each
// pair then exchanges a hello naming job id, rank and world size.
//
// Device selection: when Config.Interface names the network interface the
// bootstrap uses, DeviceForInterface maps it to its RDMA device port through
// github.com/Mellanox/rdmamap, and that port becomes UCX's NET_DEVICES
// unless Config.NetDevices or $UCX_NET_DEVICES says otherwise.
//
// # Messages
//
// Every message is its 40-byte transport.Header followed by the payload, sent
// with ucp_tag_send_nbx under a tag that holds the source rank and the
// message's sequence number within its ordered pair; the receiver posts
// ucp_tag_recv_nbx for exactly the next sequence number from that peer, so
// messages match in order whatever UCX does underneath. Payloads up to
// Config.StagingBytes are copied through staging buffers registered once
// with ucp_mem_map and kept in a pool; larger ones go zero-copy from the
// caller's memory (pinned with runtime.Pinner while UCX holds it; UCX's
// registration cache maps it once for the verbs transports), as a two-entry
// iov with the header.
//
// # Progress
//
// There is no progress thread. The goroutine waiting in Send or Recv drives
// ucp_worker_progress: it polls for Config.SpinWait, then one waiter arms
// the worker (ucp_worker_arm) and sleeps in epoll on the worker's event
// descriptor and an eventfd, while the others wait on a channel it closes
// when it wakes, so an idle rank uses no CPU. Context deadlines and
// cancellation cancel the outstanding request (ucp_request_cancel); a send
// that cannot be taken back closes the link to that peer.
//
// # Failures
//
// Close sends every peer a goodbye, so their receives fail at once with
// transport.ErrPeerGone. A peer that dies without one is reported by UCX's
// error handler (mode PEER: a broken TCP connection, keepalive after
// Config.PeerTimeout, verbs errors). Over shared memory UCX 1.13 cannot
// detect a dead peer: there only the goodbye and the caller's deadline end
// a wait.
package rdma
