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
	ch, cpath, err := open(e, cudartLibrary)
	if err != nil {
		return nil, err
	}
	a = &api{ncclPath: npath, cudartPath: cpath}
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
	creq := func(fptr any, name string) { bind(ch, fptr, name, true) }
	creq(&a.cudaGetDeviceCount, "cudaGetDeviceCount")
	creq(&a.cudaSetDevice, "cudaSetDevice")
	creq(&a.cudaMalloc, "cudaMalloc")
	creq(&a.cudaFree, "cudaFree")
	creq(&a.cudaMallocHost, "cudaMallocHost")
	creq(&a.cudaFreeHost, "cudaFreeHost")
	creq(&a.cudaMemcpyH2D, "cudaMemcpyAsync")
	creq(&a.cudaMemcpyD2H, "cudaMemcpyAsync")
	creq(&a.cudaStreamCreate, "cudaStreamCreateWithFlags")
	creq(&a.cudaStreamDestroy, "cudaStreamDestroy")
	creq(&a.cudaStreamQuery, "cudaStreamQuery")
	creq(&a.cudaGetErrorString, "cudaGetErrorString")
	creq(&a.cudaRuntimeGetVersion, "cudaRuntimeGetVersion")
	creq(&a.cudaDriverGetVersion, "cudaDriverGetVersion")
	if len(missing) > 0 {
		return nil, fmt.Errorf("nccl: %w: %s or %s lacks %v; it is too old or not NCCL/CUDA (NCCL >= 2.12 is needed)",
			ErrNotAvailable, npath, cpath, missing)
	}
	return a, nil
}

// available reports whether the libraries load, with the reason if not.
func available() error {
	_, err := loadDefault()
	return err
}
