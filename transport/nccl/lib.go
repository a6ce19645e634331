//go:build linux && (amd64 || arm64)

package nccl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

var (
	defaultOnce sync.Once
	defaultAPI  *api
	defaultErr  error
)

// loadDefault loads the libraries once per process.
func loadDefault() (*api, error) {
	defaultOnce.Do(func() { defaultAPI, defaultErr = load(osSearchEnv) })
	return defaultAPI, defaultErr
}

// open dlopens the first candidate of lib that loads. The plain names go
// first, on their own: when the loader finds the library, no directory is
// searched and no python3 is asked.
func open(e searchEnv, lib library) (uintptr, string, error) {
	if e.getenv(lib.env) == "" {
		for _, name := range lib.sonames {
			if h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
				return h, name, nil
			}
		}
	}
	tried := e.candidates(lib)
	errs := make([]error, len(tried))
	for i, path := range tried {
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, path, nil
		}
		errs[i] = err
	}
	return 0, "", e.notFound(lib, tried, errs)
}

// load finds both libraries and binds every function collkit calls. A
// missing required symbol is an error naming it, never a panic.
func load(e searchEnv) (a *api, err error) {
	nh, npath, err := open(e, ncclLibrary)
	if err != nil {
		return nil, err
	}
	ch, cpath, err := open(e, cudaLibrary)
	if err != nil {
		return nil, err
	}
	a = &api{ncclPath: npath, cudaPath: cpath}
	var missing []string
	bind := func(h uintptr, fptr any, name string, required bool) {
		sym, err := purego.Dlsym(h, name)
		if err != nil || sym == 0 {
			if required {
				missing = append(missing, name)
			}
			return
		}
		purego.RegisterFunc(fptr, sym)
	}
	req := func(fptr any, name string) { bind(nh, fptr, name, true) }
	req(&a.ncclGetVersion, "ncclGetVersion")
	req(&a.ncclGetUniqueId, "ncclGetUniqueId")
	req(&a.ncclCommInitRank, "ncclCommInitRank")
	bind(nh, &a.ncclCommInitRankCfg, "ncclCommInitRankConfig", false)
	bind(nh, &a.ncclCommSplit, "ncclCommSplit", false)
	bind(nh, &a.ncclCommFinalize, "ncclCommFinalize", false)
	bind(nh, &a.ncclCommShrink, "ncclCommShrink", false)
	bind(nh, &a.ncclCommGetUniqueId, "ncclCommGetUniqueId", false)
	bind(nh, &a.ncclCommGrow, "ncclCommGrow", false)
	if a.ncclCommGetUniqueId == nil || a.ncclCommGrow == nil { // one is no use without the other
		a.ncclCommGetUniqueId, a.ncclCommGrow = nil, nil
	}
	req(&a.ncclCommDestroy, "ncclCommDestroy")
	req(&a.ncclCommAbort, "ncclCommAbort")
	req(&a.ncclCommCount, "ncclCommCount")
	req(&a.ncclCommUserRank, "ncclCommUserRank")
	req(&a.ncclGetErrorString, "ncclGetErrorString")
	bind(nh, &a.ncclGetLastError, "ncclGetLastError", false)
	bindHot(a, nh, ch, &missing)
	// The driver API's versioned names (cuda.h maps cuMemAlloc to
	// cuMemAlloc_v2 and so on), which every driver since CUDA 4 exports.
	creq := func(fptr any, name string) { bind(ch, fptr, name, true) }
	creq(&a.cuInit, "cuInit")
	creq(&a.cuDriverGetVersion, "cuDriverGetVersion")
	creq(&a.cuDeviceGetCount, "cuDeviceGetCount")
	creq(&a.cuDeviceGet, "cuDeviceGet")
	creq(&a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	creq(&a.cuMemAlloc, "cuMemAlloc_v2")
	creq(&a.cuMemFree, "cuMemFree_v2")
	creq(&a.cuMemHostAlloc, "cuMemHostAlloc")
	creq(&a.cuMemFreeHost, "cuMemFreeHost")
	creq(&a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	creq(&a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	creq(&a.cuMemsetD8Async, "cuMemsetD8Async")
	creq(&a.cuStreamCreate, "cuStreamCreate")
	creq(&a.cuStreamDestroy, "cuStreamDestroy_v2")
	creq(&a.cuGetErrorString, "cuGetErrorString")
	if len(missing) > 0 {
		return nil, fmt.Errorf("nccl: %w: %s or %s lacks %v; it is too old or not NCCL/the CUDA driver (NCCL >= 2.12 and a CUDA 11 or newer driver are needed)",
			ErrNotAvailable, npath, cpath, missing)
	}
	return a, nil
}

// bindHot binds the functions every collective calls with direct
// purego.SyscallN calls: a RegisterFunc call goes through reflection and
// costs about three times as much, with more allocations. A C int
// argument is read from the low 32 bits of its slot, and a C int result is
// the low 32 bits of r1. Pointer arguments point to heap memory the caller
// keeps (SyscallN's uintptrescapes would move stack variables there).
func bindHot(a *api, nh, ch uintptr, missing *[]string) {
	sym := func(h uintptr, name string) uintptr {
		p, err := purego.Dlsym(h, name)
		if err != nil || p == 0 {
			*missing = append(*missing, name)
		}
		return p
	}
	call := func(fn uintptr, args ...uintptr) int32 {
		r, _, _ := purego.SyscallN(fn, args...)
		return int32(r)
	}
	allReduce, broadcast, reduce := sym(nh, "ncclAllReduce"), sym(nh, "ncclBroadcast"), sym(nh, "ncclReduce")
	allGather, reduceScatter := sym(nh, "ncclAllGather"), sym(nh, "ncclReduceScatter")
	send, recv := sym(nh, "ncclSend"), sym(nh, "ncclRecv")
	groupStart, groupEnd, asyncErr := sym(nh, "ncclGroupStart"), sym(nh, "ncclGroupEnd"), sym(nh, "ncclCommGetAsyncError")
	setCurrent, query, attrs := sym(ch, "cuCtxSetCurrent"), sym(ch, "cuStreamQuery"), sym(ch, "cuPointerGetAttributes")
	u := func(v int32) uintptr { return uintptr(uint32(v)) }
	a.ncclAllReduce = func(s, r, n uintptr, dt, op int32, comm, stream uintptr) int32 {
		return call(allReduce, s, r, n, u(dt), u(op), comm, stream)
	}
	a.ncclBroadcast = func(s, r, n uintptr, dt, root int32, comm, stream uintptr) int32 {
		return call(broadcast, s, r, n, u(dt), u(root), comm, stream)
	}
	a.ncclReduce = func(s, r, n uintptr, dt, op, root int32, comm, stream uintptr) int32 {
		return call(reduce, s, r, n, u(dt), u(op), u(root), comm, stream)
	}
	a.ncclAllGather = func(s, r, n uintptr, dt int32, comm, stream uintptr) int32 {
		return call(allGather, s, r, n, u(dt), comm, stream)
	}
	a.ncclReduceScatter = func(s, r, n uintptr, dt, op int32, comm, stream uintptr) int32 {
		return call(reduceScatter, s, r, n, u(dt), u(op), comm, stream)
	}
	a.ncclSend = func(b, n uintptr, dt, peer int32, comm, stream uintptr) int32 {
		return call(send, b, n, u(dt), u(peer), comm, stream)
	}
	a.ncclRecv = func(b, n uintptr, dt, peer int32, comm, stream uintptr) int32 {
		return call(recv, b, n, u(dt), u(peer), comm, stream)
	}
	a.ncclGroupStart = func() int32 { return call(groupStart) }
	a.ncclGroupEnd = func() int32 { return call(groupEnd) }
	a.ncclCommGetAsyncError = func(comm uintptr, res *int32) int32 {
		return call(asyncErr, comm, uintptr(unsafe.Pointer(res)))
	}
	a.cuCtxSetCurrent = func(ctx uintptr) int32 { return call(setCurrent, ctx) }
	a.cuStreamQuery = func(s uintptr) int32 { return call(query, s) }
	a.cuPointerGetAttributes = func(n uint32, kinds *uint32, data *unsafe.Pointer, ptr uintptr) int32 {
		return call(attrs, uintptr(n), uintptr(unsafe.Pointer(kinds)), uintptr(unsafe.Pointer(data)), ptr)
	}
}

// available reports whether the libraries load, with the reason if not.
func available() error {
	_, err := loadDefault()
	return err
}
