//go:build linux && (amd64 || arm64)

package nccl

import (
	"fmt"
	"sync"

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

// open dlopens the first candidate of lib that loads.
func open(e searchEnv, lib library) (uintptr, string, error) {
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
	req(&a.ncclCommDestroy, "ncclCommDestroy")
	req(&a.ncclCommAbort, "ncclCommAbort")
	req(&a.ncclCommGetAsyncError, "ncclCommGetAsyncError")
	req(&a.ncclCommCount, "ncclCommCount")
	req(&a.ncclCommUserRank, "ncclCommUserRank")
	req(&a.ncclGetErrorString, "ncclGetErrorString")
	bind(nh, &a.ncclGetLastError, "ncclGetLastError", false)
	req(&a.ncclAllReduce, "ncclAllReduce")
	req(&a.ncclBroadcast, "ncclBroadcast")
	req(&a.ncclReduce, "ncclReduce")
	req(&a.ncclAllGather, "ncclAllGather")
	req(&a.ncclReduceScatter, "ncclReduceScatter")
	req(&a.ncclSend, "ncclSend")
	req(&a.ncclRecv, "ncclRecv")
	req(&a.ncclGroupStart, "ncclGroupStart")
	req(&a.ncclGroupEnd, "ncclGroupEnd")
	// The driver API's versioned names (cuda.h maps cuMemAlloc to
	// cuMemAlloc_v2 and so on), which every driver since CUDA 4 exports.
	creq := func(fptr any, name string) { bind(ch, fptr, name, true) }
	creq(&a.cuInit, "cuInit")
	creq(&a.cuDriverGetVersion, "cuDriverGetVersion")
	creq(&a.cuDeviceGetCount, "cuDeviceGetCount")
	creq(&a.cuDeviceGet, "cuDeviceGet")
	creq(&a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	creq(&a.cuCtxSetCurrent, "cuCtxSetCurrent")
	creq(&a.cuMemAlloc, "cuMemAlloc_v2")
	creq(&a.cuMemFree, "cuMemFree_v2")
	creq(&a.cuMemHostAlloc, "cuMemHostAlloc")
	creq(&a.cuMemFreeHost, "cuMemFreeHost")
	creq(&a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	creq(&a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	creq(&a.cuMemsetD8Async, "cuMemsetD8Async")
	creq(&a.cuStreamCreate, "cuStreamCreate")
	creq(&a.cuStreamDestroy, "cuStreamDestroy_v2")
	creq(&a.cuStreamQuery, "cuStreamQuery")
	creq(&a.cuPointerGetAttributes, "cuPointerGetAttributes")
	creq(&a.cuGetErrorString, "cuGetErrorString")
	if len(missing) > 0 {
		return nil, fmt.Errorf("nccl: %w: %s or %s lacks %v; it is too old or not NCCL/the CUDA driver (NCCL >= 2.12 and a CUDA 11 or newer driver are needed)",
			ErrNotAvailable, npath, cpath, missing)
	}
	return a, nil
}

// available reports whether the libraries load, with the reason if not.
func available() error {
	_, err := loadDefault()
	return err
}
