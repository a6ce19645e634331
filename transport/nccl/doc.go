// Package nccl is a collkit transport that drives NVIDIA's NCCL on CUDA
// GPUs. It loads libnccl.so.2 and the CUDA runtime (libcudart) when a
// program runs, through github.com/ebitengine/purego, so building collkit
// needs neither CUDA nor cgo, and a machine without them gets a clear
// error wrapping ErrNotAvailable instead of a failed build.
//
// Libraries are searched for in this order: $COLLKIT_NCCL_LIB and
// $COLLKIT_CUDART_LIB when set (and only those); the dynamic loader's path
// (LD_LIBRARY_PATH, ldconfig); the layouts of the pip wheels
// nvidia-nccl-cu12 and nvidia-cuda-runtime-cu12 (site-packages/nvidia/
// {nccl,cuda_runtime}/lib) in the active virtualenv or conda env,
// PYTHONPATH, the user's and the system's site-packages; and
// /usr/local/cuda/lib64.
//
// Use:
//
//	t, err := nccl.New(nccl.Config{Rank: env.Rank, Size: env.Size, LocalRank: env.LocalRank})
//	if err != nil { ... }            // errors.Is(err, nccl.ErrNotAvailable) without NCCL
//	err = t.Connect(ctx, store)      // rank 0's unique id shared through the store
//	h := transport.Header{Count: n, DType: reduce.Float32, Op: reduce.Sum}
//	err = t.AllReduce(ctx, h, send, recv)
//
// Each rank uses CUDA device LocalRank modulo the visible devices. Data
// lives in host memory: every call copies it through pinned staging buffers
// to device buffers made with cudaMalloc, runs NCCL on the communicator's
// own CUDA stream, and copies the result back, so results can be checked
// on the host.
//
// Communicators are created in NCCL's non-blocking mode, and every wait
// (creation, each collective) polls ncclCommGetAsyncError and
// cudaStreamQuery with a bounded backoff until it finishes, fails, or the
// context ends; then the communicator is aborted with ncclCommAbort and the
// call returns an error. A missing or stuck peer never hangs a call.
//
// Transport satisfies transport.NativeCollectives (NCCL's own all-reduce,
// broadcast, reduce, all-gather and reduce-scatter, each described by a
// transport.Header as collkit's algorithms are), which collkit.Comm uses,
// and transport.Transport (framed Send and Recv over ncclSend and
// ncclRecv), so it can carry the intra-node level of algo/hierarchical.
// Exchange groups any sends and receives with ncclGroupStart/End, and Split
// makes sub-communicators with ncclCommSplit.
package nccl
