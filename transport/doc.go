// Package transport defines how collkit moves bytes between the ranks of a job:
// the Transport interface that every implementation (tcp, shm, mem, rdma, nccl)
// satisfies, the Header that frames each message, and the errors they return.
//
// A Transport is deliberately small. Algorithms (package algo/...) are written
// only against it, so any algorithm runs over any transport. Capabilities that
// only some transports have are separate small interfaces found by type
// assertion, never methods every transport must stub: Buffered, Spanner, and
// the native collectives (native.go) of transports that run a collective
// themselves, NativeAllReducer (shm, nccl) and NativeCollectives (nccl),
// described by a Header as the algorithms' collectives are. Failure
// reports use those of failure.go: Aborter, Prober, WaitReporter and Pinger.
//
// # Contract
//
//   - Messages between one ordered pair of ranks arrive in the order they were
//     sent, and each Recv matches the next message from that peer.
//   - Send and Recv to different peers may run concurrently, and a Send to a
//     peer may run concurrently with a Recv from the same peer (full duplex).
//     At most one Send per peer and one Recv per peer are in flight at a time;
//     algorithms that need more serialize them.
//   - Send may block until the peer starts receiving (flow control). An
//     algorithm that sends and receives in the same step does one of them on
//     another goroutine.
//   - Every message carries a Header. Recv states the Header it expects and
//     fails with a *MismatchError when the peer sent something else, so ranks
//     that disagree on an operation get an error, never wrong data or a hang.
//   - Every error that concerns one peer is a *PeerError naming it. After an
//     error a Transport may be unusable; callers Close it (errors are fatal to a
//     communicator, as in NCCL).
package transport
