package nccl

import "unsafe"

// api holds the NCCL and CUDA runtime functions, bound at run time. Handles
// (ncclComm_t, cudaStream_t) and device pointers are uintptr: they are not
// Go memory.
type api struct {
	ncclPath, cudartPath string

	ncclGetVersion        func(v *int32) int32
	ncclGetUniqueId       func(id *uniqueID) int32
	ncclCommInitRank      func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32
	ncclCommInitRankCfg   func(comm *uintptr, nranks int32, id uniqueID, rank int32, cfg *commConfig) int32 // nil before NCCL 2.14
	ncclCommSplit         func(comm uintptr, color, key int32, newcomm *uintptr, cfg *commConfig) int32     // nil before NCCL 2.18
	ncclCommFinalize      func(comm uintptr) int32                                                          // nil before NCCL 2.14
	ncclCommDestroy       func(comm uintptr) int32
	ncclCommAbort         func(comm uintptr) int32
	ncclCommGetAsyncError func(comm uintptr, res *int32) int32
	ncclCommCount         func(comm uintptr, n *int32) int32
	ncclCommUserRank      func(comm uintptr, r *int32) int32
	ncclGetErrorString    func(res int32) string
	ncclGetLastError      func(comm uintptr) string // nil before NCCL 2.13
	ncclAllReduce         func(send, recv, count uintptr, dt, op int32, comm, stream uintptr) int32
	ncclBroadcast         func(send, recv, count uintptr, dt, root int32, comm, stream uintptr) int32
	ncclReduce            func(send, recv, count uintptr, dt, op, root int32, comm, stream uintptr) int32
	ncclAllGather         func(send, recv, count uintptr, dt int32, comm, stream uintptr) int32
	ncclReduceScatter     func(send, recv, count uintptr, dt, op int32, comm, stream uintptr) int32
	ncclSend              func(buf, count uintptr, dt, peer int32, comm, stream uintptr) int32
	ncclRecv              func(buf, count uintptr, dt, peer int32, comm, stream uintptr) int32
	ncclGroupStart        func() int32
	ncclGroupEnd          func() int32

	cudaGetDeviceCount    func(n *int32) int32
	cudaSetDevice         func(dev int32) int32
	cudaMalloc            func(p *uintptr, size uintptr) int32
	cudaFree              func(p uintptr) int32
	cudaMallocHost        func(p *unsafe.Pointer, size uintptr) int32
	cudaFreeHost          func(p unsafe.Pointer) int32
	cudaMemcpyH2D         func(dst uintptr, src unsafe.Pointer, n uintptr, kind int32, stream uintptr) int32
	cudaMemcpyD2H         func(dst unsafe.Pointer, src uintptr, n uintptr, kind int32, stream uintptr) int32
	cudaStreamCreate      func(s *uintptr, flags uint32) int32
	cudaStreamDestroy     func(s uintptr) int32
	cudaStreamQuery       func(s uintptr) int32
	cudaGetErrorString    func(code int32) string
	cudaRuntimeGetVersion func(v *int32) int32
	cudaDriverGetVersion  func(v *int32) int32
}
