// Package nccl is a collkit transport that drives NVIDIA's NCCL on CUDA
// GPUs. It loads libnccl.so.2 and the CUDA driver (libcuda.so.1, part of
// every NVIDIA driver install) when a program runs, through
// github.com/ebitengine/purego, so building collkit needs neither CUDA nor
// cgo (CGO_ENABLED=0 works), and a machine without them gets a clear error
// wrapping ErrNotAvailable instead of a failed build. Memory and streams go
// through the driver API, so no CUDA runtime (libcudart) is needed.
//
// # Finding the libraries
//
// $COLLKIT_NCCL_LIB and $COLLKIT_CUDA_LIB, when set, name the files (and
// only those are tried). Otherwise libnccl.so.2 is looked for through the
// dynamic loader (LD_LIBRARY_PATH, ldconfig), then in the pip wheels'
// directories (site-packages/nvidia/nccl/lib of nvidia-nccl-cu12 and -cu13,
// and nvidia/cu13/lib) under the site-packages of the active virtualenv or
// conda env, PYTHONPATH, the python3 on PATH (asked once, with a short
// timeout), the user's, common environment locations (./.venv, ~/.venv,
// /opt/*/.venv, /opt/*/venv, /opt/conda, ~/miniconda3, ...) and the
// system's; then in /usr/local/cuda/lib64 and the system library
// directories. libcuda.so.1 is looked for through the loader and in the
// system and container driver directories. The error of a failed search
// lists every place it looked and the variable that overrides it.
//
// # Use
//
//	t, err := nccl.New(nccl.Config{Rank: env.Rank, Size: env.Size, LocalRank: env.LocalRank})
//	if err != nil { ... }            // errors.Is(err, nccl.ErrNotAvailable) without NCCL
//	err = t.Connect(ctx, store)      // rank 0's unique id shared through the store
//	h := transport.Header{Count: n, DType: reduce.Float32, Op: reduce.Sum}
//	err = t.AllReduceDevice(ctx, h, send, recv) // GPU memory, no copy
//	err = t.AllReduce(ctx, h, sendBytes, recvBytes) // host memory, staged
//
// Each rank uses CUDA device LocalRank modulo the visible devices, in that
// device's primary context (the one the CUDA runtime, and so PyTorch, uses).
// More local ranks than GPUs is an error wrapping ErrGPUShared, unless
// NCCL is 2.30 or newer and NCCL_MULTI_RANK_GPU_ENABLE=1 is set.
//
// # Device memory
//
// The Device methods (AllReduceDevice, BroadcastDevice, ReduceDevice,
// AllGatherDevice, ReduceScatterDevice: transport.DeviceCollectives;
// ExchangeDevice: transport.DeviceExchanger; GroupDevice, any of them in
// one NCCL group: transport.DeviceGrouper) take transport.DeviceBuffers
// and hand their pointers to NCCL: nothing is copied. A DeviceBuffer comes
// from Alloc (cuMemAlloc; Memory copies to and from the host and frees), or
// wraps a device pointer from another CUDA library with its length and
// device. Before each call the driver is asked what every buffer is (one
// cuPointerGetAttributes each): host memory, freed memory, memory on
// another GPU, or a buffer longer than its allocation is an error wrapping
// transport.ErrBadDeviceBuffer that names the rank and the buffer, and
// NCCL is not called. The []byte methods take host memory, copied through
// pinned staging buffers to the GPU and back, so results can be checked on
// the host.
//
// # Waiting, timeouts and cost per call
//
// Communicators are created in NCCL's blocking mode by default. The
// non-blocking mode (Config.NonBlocking) makes NCCL start a thread for
// every grouped call, which is every collective, so a small collective
// would cost far more than NCCL itself. In blocking mode an NCCL call
// returns once the work is queued on the communicator's stream, except
// when NCCL blocks in it (connecting to peers on first use, a peer gone): a
// watchdog armed around each call then aborts the communicator
// (ncclCommAbort from another goroutine, as PyTorch's watchdog does) when
// the call's context or the Transport ends, and NCCL returns. Creating a
// blocking communicator runs on a goroutine of its own: when the context
// ends first, Connect returns an error at once, and the communicator is
// aborted if NCCL ever forms it.
//
// Completion is found by polling cuStreamQuery and ncclCommGetAsyncError
// (so a failure on another rank surfaces): spinning for the first rounds,
// where a small collective ends, then yielding the processor for two
// milliseconds, then sleeping at most 50 microseconds at a time; no
// millisecond sleeps. When the context or the Transport ends first, the
// communicator is aborted and the call returns an error: a missing or
// stuck peer never hangs a call. With Config.KeepForShrink the
// communicator of all ranks is kept instead (every later call fails) for
// Shrink, which ends what the failed call left running; Close aborts it.
// A remote error (a peer's process exited) matches transport.ErrPeerGone.
//
// # Shrinking and growing
//
// Shrink makes a Transport over the ranks not excluded, numbered in their
// old order, with ncclCommShrink (NCCL 2.27 and newer), passing
// NCCL_SHRINK_ABORT when a call failed or was left unfinished (CanShrink
// says which). NCCL refuses to shrink a communicator with an asynchronous
// error (a peer's death it reported, ncclRemoteError), whatever the flag;
// CanShrink says false for one. Grow makes one with more ranks with ncclCommGrow (NCCL 2.29
// and newer): one old rank makes the id with GrowID (ncclCommGetUniqueId),
// the old ranks keep their numbers, and each new rank joins with
// ConnectGrow and that id at a number from the old size up. Both symbols
// are bound when the library exports them: with an older NCCL, CanShrink
// and CanGrow say false and the calls return ErrUnsupported, and the next
// communicator is made anew with Connect. Both reuse the old communicator's
// bootstrap, run on blocking communicators only, and leave the old
// Transport to be closed. collkit's elastic communicators use them over
// --transport nccl when every rank can (collkit.Comm.Shrink and Grow). They
// have been tested only against the fake library of this package's tests,
// not yet on a GPU.
//
// # Algorithms
//
// Config.Algo sets NCCL_ALGO before the communicator is created. NCCL 2.24
// and newer take it per collective, so "allreduce:ring" or
// "allreduce:tree" is set and the other collectives keep NCCL's choice.
// Older NCCL takes one algorithm for every collective: "Ring" is set for
// ring (every collective has one), and tree is refused, because broadcast,
// all-gather and reduce-scatter have no tree and would fail.
//
// Transport satisfies transport.NativeCollectives (NCCL's own all-reduce,
// broadcast, reduce, all-gather and reduce-scatter, each described by a
// transport.Header as collkit's algorithms are), which collkit.Comm uses,
// and transport.Transport (framed Send and Recv over ncclSend and
// ncclRecv), so it can carry the intra-node level of algo/hierarchical.
// Exchange groups any sends and receives with ncclGroupStart/End, and Split
// makes sub-communicators with ncclCommSplit.
package nccl
