package shm

import "errors"

var (
	// ErrNotConnected is wrapped by Send and Recv on a Transport whose
	// Connect has not succeeded.
	ErrNotConnected = errors.New("shm: transport not connected; call Connect first")
	// ErrNoNative is wrapped by AllReduce when Config.NativeBytes disabled
	// the native all-reduce.
	ErrNoNative = errors.New("shm: native all-reduce disabled (Config.NativeBytes < 0); use an algorithm over Send and Recv")
	// ErrUnsupported is returned by New and Reclaim on systems other than
	// Linux, where this transport is not built.
	ErrUnsupported = errors.New("shm: the shared-memory transport needs Linux (futexes on /dev/shm); use tcp")
)
