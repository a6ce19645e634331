package nccl

import "unsafe"

// api holds the NCCL and CUDA driver API functions, bound at run time.
// Handles (ncclComm_t, CUcontext, CUstream) and device pointers
// (CUdeviceptr) are uintptr: they are not Go memory.
type api struct {
	ncclPath, cudaPath string
	drv                driver

	ncclGetVersion      func(v *int32) int32
	ncclGetUniqueId     func(id *uniqueID) int32
	ncclCommInitRank    func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32
	ncclCommInitRankCfg func(comm *uintptr, nranks int32, id uniqueID, rank int32, cfg *commConfig) int32 // nil before NCCL 2.14
	ncclCommSplit       func(comm uintptr, color, key int32, newcomm *uintptr, cfg *commConfig) int32     // nil before NCCL 2.18
	ncclCommFinalize    func(comm uintptr) int32                                                          // nil before NCCL 2.14
	// ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm,
	// config, shrinkFlags); NCCL sorts the list in place. nil before 2.27.
	ncclCommShrink func(comm uintptr, exclude *int32, nexclude int32, newcomm *uintptr, cfg *commConfig, flags int32) int32
	// ncclCommGetUniqueId(comm, uniqueId) and ncclCommGrow(comm, nRanks,
	// uniqueId, rank, newcomm, config): the uniqueId of ncclCommGrow is a
	// pointer, NULL on the old ranks but the coordinator. nil before 2.29.
	ncclCommGetUniqueId   func(comm uintptr, id *uniqueID) int32
	ncclCommGrow          func(comm uintptr, nranks int32, id *uniqueID, rank int32, newcomm *uintptr, cfg *commConfig) int32
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

	// The CUDA driver API (libcuda.so.1), which every driver install has:
	// collkit needs no CUDA runtime. CUresult is int32, CUdevice int32.
	cuInit                   func(flags uint32) int32
	cuDriverGetVersion       func(v *int32) int32
	cuDeviceGetCount         func(n *int32) int32
	cuDeviceGet              func(dev *int32, ordinal int32) int32
	cuDevicePrimaryCtxRetain func(ctx *uintptr, dev int32) int32
	cuCtxSetCurrent          func(ctx uintptr) int32
	cuMemAlloc               func(p *uintptr, size uintptr) int32
	cuMemFree                func(p uintptr) int32
	cuMemHostAlloc           func(p *unsafe.Pointer, size uintptr, flags uint32) int32
	cuMemFreeHost            func(p unsafe.Pointer) int32
	cuMemcpyHtoDAsync        func(dst uintptr, src unsafe.Pointer, n uintptr, stream uintptr) int32
	cuMemcpyDtoHAsync        func(dst unsafe.Pointer, src uintptr, n uintptr, stream uintptr) int32
	cuMemsetD8Async          func(dst uintptr, v uint8, n uintptr, stream uintptr) int32
	cuStreamCreate           func(s *uintptr, flags uint32) int32
	cuStreamDestroy          func(s uintptr) int32
	cuStreamQuery            func(s uintptr) int32
	cuPointerGetAttributes   func(n uint32, attrs *uint32, data *unsafe.Pointer, ptr uintptr) int32
	cuGetErrorString         func(code int32, s **byte) int32
}

// cudaErrorString is the driver's description of code.
func (a *api) cudaErrorString(code int32) string {
	var s *byte
	if a.cuGetErrorString(code, &s) != cuSuccess || s == nil {
		return "unknown CUDA error"
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(s), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(s, n))
}
