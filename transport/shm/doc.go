// Package shm is collkit's shared-memory transport for ranks on one host:
// messages go through lock-free rings in /dev/shm segments instead of the
// TCP stack, and a native all-reduce (Transport.AllReduce, the
// transport.NativeAllReducer capability) reduces straight out of the other
// ranks' shared buffers.
//
//	t, err := shm.New(shm.Config{Rank: env.Rank, Size: env.Size, JobID: env.JobID})
//	err = t.Connect(ctx, store) // segments named through the bootstrap store
//	defer t.Close()
//
// # Segments
//
// Every rank creates one segment file in Config.Dir (default /dev/shm),
// named collkit-<token>-<rank> after a random token rank 0 publishes in the
// store, and maps every other rank's. A segment holds its owner's pid and
// closed flag, the rings on which the owner receives (one per sender) and
// the owner's native all-reduce buffer. Once every rank has mapped every
// segment, each removes its own file: the mappings stay valid, and a job
// that crashes later leaves nothing behind. Segments of a job that crashed
// during setup are removed by the next Connect on the host (Reclaim), which
// deletes the segments whose owner pid no longer exists.
//
// # Rings
//
// Each ordered pair of ranks has a single-producer single-consumer byte
// ring of Config.RingBytes (1 MiB by default). A message is its 40-byte
// transport.Header and its payload, back to back; a message larger than
// the ring streams through it, the sender copying in batches of up to 256
// KiB while the receiver copies out, so each byte is copied twice. The
// sender copies 4 KiB or more with streaming stores (internal/stream) where
// Connect timed them faster than ordinary ones (Config.Stores): the
// receiver read those lines on the ring's last lap, and on some machines
// ordinary stores first take each back from its cache. The receiver checks the header against the one it expects and fails with a
// *transport.MismatchError when they differ.
//
// # Waiting
//
// A rank with nothing to do polls (Config.Spin times), then polls with
// sched_yield for Config.Yield, then sleeps on a futex word in the segment
// that the other side wakes after moving data. While asleep it wakes every
// Config.LivenessInterval to check its context, the peer's closed flag and
// whether the peer's process still exists (kill(pid, 0)), so a crashed peer
// is an error wrapping transport.ErrPeerGone, not a hang. Close sets the
// closed flag and wakes everyone waiting on this rank. When ranks outnumber
// cores keep Spin and Yield short: a polling rank holds the core the rank it
// waits for needs.
//
// # Native all-reduce
//
// A buffer of SmallNativeBytes (4 KiB) or less, SmallNativeBytesMany (16
// KiB) above 2 ranks, takes one barrier: every
// rank writes its input, then publishes the barrier in its call slot, a
// line of its segment that also holds the call's header and, up to 208
// bytes, the input itself, so that a peer polling for the barrier finds
// the whole call in the line it fetched (Open MPI's vader calls these fast
// boxes). Every rank then reduces all inputs in rank order, so all get the
// same bits. Larger buffers go in chunks of half of Config.NativeBytes (512
// KiB by default, so that a chunk's buffers stay in a core's cache): for
// each chunk every rank copies its input, all but its own 1/Size slice,
// into its shared buffer (with the stores Connect chose, see
// Config.Stores), waits at a barrier, reduces its slice from its own input
// and every peer's buffer into recv and its shared buffer, waits at a
// second barrier and copies the other ranks' reduced slices out.
// Slots and buffer halves alternate from one chunk to the next, so a rank
// that runs ahead never overwrites what a slower one still reads.
package shm
