package nccl

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/collkit/collkit/transport"
)

// driver is the CUDA driver's state collkit keeps per process: whether
// cuInit succeeded and each device's primary context, the one the CUDA
// runtime (and so NCCL, PyTorch and others) uses too.
type driver struct {
	initOnce sync.Once
	initErr  error
	mu       sync.Mutex
	ctxs     map[int]uintptr
}

// devices initializes the driver once and returns the number of visible
// devices, or an error wrapping ErrNoDevice.
func (a *api) devices() (int, error) {
	a.drv.initOnce.Do(func() {
		if r := a.cuInit(0); r != cuSuccess {
			a.drv.initErr = fmt.Errorf("%w: cuInit: %s (code %d); check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES", ErrNoDevice, a.cudaErrorString(r), r)
		}
	})
	if a.drv.initErr != nil {
		return 0, a.drv.initErr
	}
	var n int32
	if r := a.cuDeviceGetCount(&n); r != cuSuccess {
		return 0, fmt.Errorf("%w: cuDeviceGetCount: %s (code %d); check the NVIDIA driver (nvidia-smi)", ErrNoDevice, a.cudaErrorString(r), r)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: none is visible; check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES", ErrNoDevice)
	}
	return int(n), nil
}

// context returns device dev's primary context, retained once.
func (a *api) context(dev int) (uintptr, error) {
	n, err := a.devices()
	if err != nil {
		return 0, err
	}
	if dev < 0 || dev >= n {
		return 0, fmt.Errorf("%w: GPU %d does not exist; %d are visible (0 to %d)", ErrNoDevice, dev, n, n-1)
	}
	a.drv.mu.Lock()
	defer a.drv.mu.Unlock()
	if ctx, ok := a.drv.ctxs[dev]; ok {
		return ctx, nil
	}
	var d int32
	if r := a.cuDeviceGet(&d, int32(dev)); r != cuSuccess {
		return 0, fmt.Errorf("cuDeviceGet(%d): %s (code %d)", dev, a.cudaErrorString(r), r)
	}
	var ctx uintptr
	if r := a.cuDevicePrimaryCtxRetain(&ctx, d); r != cuSuccess {
		return 0, fmt.Errorf("cuDevicePrimaryCtxRetain(GPU %d): %s (code %d)", dev, a.cudaErrorString(r), r)
	}
	if a.drv.ctxs == nil {
		a.drv.ctxs = make(map[int]uintptr)
	}
	a.drv.ctxs[dev] = ctx
	return ctx, nil
}

// DeviceCount is the number of CUDA devices this process sees (after
// CUDA_VISIBLE_DEVICES). The error wraps ErrNotAvailable without NCCL or
// the driver, ErrNoDevice without a GPU.
func DeviceCount() (int, error) {
	a, err := loadDefault()
	if err != nil {
		return 0, err
	}
	return a.devices()
}

// Library describes the NCCL this process loads.
type Library struct {
	Version     string // "2.27.3"
	VersionCode int    // ncclGetVersion's code, 22703
	NCCLPath    string // the libnccl.so.2 loaded
	CUDAPath    string // the libcuda.so.1 loaded
}

// Installed loads NCCL and the CUDA driver (once per process) and says
// which; it touches no GPU. The error wraps ErrNotAvailable.
func Installed() (Library, error) {
	a, err := loadDefault()
	if err != nil {
		return Library{}, err
	}
	var v int32
	if r := a.ncclGetVersion(&v); r != ncclSuccess {
		return Library{}, fmt.Errorf("nccl: ncclGetVersion failed (code %d) in %s", r, a.ncclPath)
	}
	return Library{Version: versionString(int(v)), VersionCode: int(v), NCCLPath: a.ncclPath, CUDAPath: a.cudaPath}, nil
}

// Memory is device memory collkit allocated (cuMemAlloc) on one GPU. Pass
// Buffer() to the device collectives; Free it when done.
type Memory struct {
	a     *api
	cuCtx uintptr
	buf   transport.DeviceBuffer
	mu    sync.Mutex
	freed bool
}

// Alloc allocates n bytes on CUDA device dev. The error wraps
// ErrNotAvailable without NCCL or the driver, ErrNoDevice when dev is not
// a visible GPU.
func Alloc(dev, n int) (*Memory, error) {
	a, err := loadDefault()
	if err != nil {
		return nil, err
	}
	return alloc(a, dev, n)
}

func alloc(a *api, dev, n int) (*Memory, error) {
	if n <= 0 {
		return nil, fmt.Errorf("nccl: allocating %d bytes on GPU %d: the size must be positive", n, dev)
	}
	ctx, err := a.context(dev)
	if err != nil {
		return nil, fmt.Errorf("nccl: allocating %d bytes on GPU %d: %w", n, dev, err)
	}
	m := &Memory{a: a, cuCtx: ctx}
	var p uintptr
	if err := m.onDevice(func() error {
		if r := a.cuMemAlloc(&p, uintptr(n)); r != cuSuccess {
			return fmt.Errorf("cuMemAlloc: %s (code %d)", a.cudaErrorString(r), r)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("nccl: allocating %d bytes on GPU %d: %w", n, dev, err)
	}
	m.buf = transport.DeviceBuffer{Ptr: p, Len: n, Device: dev}
	return m, nil
}

func (m *Memory) onDevice(f func() error) error {
	c := comm{a: m.a, cuCtx: m.cuCtx, dev: int32(m.buf.Device)}
	return c.onDevice(f)
}

// Buffer is the whole allocation.
func (m *Memory) Buffer() transport.DeviceBuffer { return m.buf }

// CopyFromHost copies p to the start of m and returns once it is there.
func (m *Memory) CopyFromHost(p []byte) error {
	return m.copy("copy to the GPU", len(p), func(s uintptr) int32 {
		return m.a.cuMemcpyHtoDAsync(m.buf.Ptr, unsafe.Pointer(unsafe.SliceData(p)), uintptr(len(p)), s)
	})
}

// CopyToHost copies the first len(p) bytes of m to p and returns once they
// are there.
func (m *Memory) CopyToHost(p []byte) error {
	return m.copy("copy from the GPU", len(p), func(s uintptr) int32 {
		return m.a.cuMemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(p)), m.buf.Ptr, uintptr(len(p)), s)
	})
}

// Fill sets every byte of m to v.
func (m *Memory) Fill(v byte) error {
	return m.copy("fill", m.buf.Len, func(s uintptr) int32 {
		return m.a.cuMemsetD8Async(m.buf.Ptr, v, uintptr(m.buf.Len), s)
	})
}

// copy runs one transfer of n bytes on a stream of its own and waits for
// it.
func (m *Memory) copy(what string, n int, start func(stream uintptr) int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.freed:
		return fmt.Errorf("nccl: %s of %d bytes: the memory (%v) was freed", what, n, m.buf)
	case n > m.buf.Len:
		return fmt.Errorf("nccl: %s of %d bytes: the memory holds %d bytes (%v)", what, n, m.buf.Len, m.buf)
	case n == 0:
		return nil
	}
	return m.onDevice(func() error {
		var s uintptr
		if r := m.a.cuStreamCreate(&s, cuStreamNonBlocking); r != cuSuccess {
			return fmt.Errorf("nccl: %s: cuStreamCreate: %s (code %d)", what, m.a.cudaErrorString(r), r)
		}
		defer m.a.cuStreamDestroy(s)
		if r := start(s); r != cuSuccess {
			return fmt.Errorf("nccl: %s of %d bytes (%v): %s (code %d)", what, n, m.buf, m.a.cudaErrorString(r), r)
		}
		var w spinner
		for {
			switch r := m.a.cuStreamQuery(s); r {
			case cuSuccess:
				return nil
			case cuErrorNotReady:
				w.wait()
			default:
				return fmt.Errorf("nccl: %s of %d bytes (%v): cuStreamQuery: %s (code %d)", what, n, m.buf, m.a.cudaErrorString(r), r)
			}
		}
	})
}

// Free releases the memory. Buffers taken from it must not be used after;
// the device collectives reject them. Safe to call more than once.
func (m *Memory) Free() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.freed {
		return nil
	}
	m.freed = true
	return m.onDevice(func() error {
		if r := m.a.cuMemFree(m.buf.Ptr); r != cuSuccess {
			return fmt.Errorf("nccl: freeing %v: cuMemFree: %s (code %d)", m.buf, m.a.cudaErrorString(r), r)
		}
		return nil
	})
}

// namedBuffer is a device buffer an operation uses, with its role for
// errors: "send", "recv", or "send to" and "receive from" a peer.
type namedBuffer struct {
	role string
	buf  transport.DeviceBuffer
	peer int // for a role with a peer
}

func (nb namedBuffer) String() string {
	if strings.HasSuffix(nb.role, " to") || strings.HasSuffix(nb.role, " from") {
		return fmt.Sprintf("%s rank %d", nb.role, nb.peer)
	}
	return nb.role
}

// pointerAttrs is the scratch memory of one cuPointerGetAttributes call:
// heap memory that lives with its communicator, so that checking a buffer
// allocates nothing.
type pointerAttrs struct {
	kinds    [4]uint32
	out      [4]unsafe.Pointer
	memType  uint32
	ordinal  int32
	start    uintptr
	size     uintptr
	prepared bool
}

// badBufferError is a device buffer a call cannot use; it wraps
// transport.ErrBadDeviceBuffer and leaves the communicator usable.
type badBufferError struct {
	rank int
	msg  string
}

func (e *badBufferError) Error() string { return fmt.Sprintf("rank %d: %s", e.rank, e.msg) }
func (e *badBufferError) Unwrap() error { return transport.ErrBadDeviceBuffer }

// checkBuffer asks the driver what b.Ptr is (one cuPointerGetAttributes
// call) and returns an error unless it is device memory on this
// communicator's GPU that holds b.Len bytes from there. Caller: on the
// device's thread.
func (c *comm) checkBuffer(nb namedBuffer) error {
	b := nb.buf
	bad := func(format string, args ...any) error {
		return &badBufferError{rank: c.rank, msg: fmt.Sprintf("%v buffer (%v): ", nb, b) + fmt.Sprintf(format, args...)}
	}
	if b.Len == 0 {
		return nil
	}
	if b.Len < 0 || b.Ptr == 0 {
		return bad("not a device buffer; take one from nccl.Alloc or wrap a device pointer with its length")
	}
	if b.Device != int(c.dev) {
		return bad("it says GPU %d but this rank runs on GPU %d; pass memory on GPU %d", b.Device, c.dev, c.dev)
	}
	at := c.attrs
	if !at.prepared {
		at.kinds = [4]uint32{cuPointerAttrMemoryType, cuPointerAttrDeviceOrdinal, cuPointerAttrRangeStart, cuPointerAttrRangeSize}
		at.out = [4]unsafe.Pointer{unsafe.Pointer(&at.memType), unsafe.Pointer(&at.ordinal), unsafe.Pointer(&at.start), unsafe.Pointer(&at.size)}
		at.prepared = true
	}
	at.memType, at.ordinal, at.start, at.size = 0, -1, 0, 0
	if r := c.a.cuPointerGetAttributes(4, &at.kinds[0], &at.out[0], b.Ptr); r != cuSuccess {
		return bad("cuPointerGetAttributes: %s (code %d)", c.a.cudaErrorString(r), r)
	}
	switch at.memType {
	case cuMemoryTypeDevice, cuMemoryTypeUnified:
	case cuMemoryTypeHost:
		return bad("it is pinned host memory, not device memory; pass it to the []byte method (staged), or use device memory")
	default:
		return bad("the CUDA driver does not know it as device memory (host memory, or freed); pass memory from nccl.Alloc or cudaMalloc, or host memory to the []byte method")
	}
	if int(at.ordinal) != b.Device {
		return bad("the memory is on GPU %d, not GPU %d as the buffer says; this rank runs on GPU %d", at.ordinal, b.Device, c.dev)
	}
	if end := at.start + at.size; b.Ptr+uintptr(b.Len) > end {
		return bad("its allocation ends %d bytes after its start (at %#x), short of the %d bytes it says", end-b.Ptr, end, b.Len)
	}
	return nil
}
