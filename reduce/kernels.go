package reduce

import (
	"fmt"
	"unsafe"
)

// Reduce computes dst[i] = dst[i] op src[i] for every element. For Avg it sums;
// call Finish on the fully reduced buffer. dst and src must have the same
// length, a multiple of dt.Size(); Reduce panics otherwise, since callers
// validate sizes once per collective, not per segment.
func Reduce(dt DType, op Op, dst, src []byte) {
	ReduceTo(dt, op, dst, dst, src)
}

// ReduceTo computes dst[i] = a[i] op b[i]. dst may alias a or b exactly.
func ReduceTo(dt DType, op Op, dst, a, b []byte) {
	if len(a) != len(dst) || len(b) != len(dst) {
		panic(fmt.Sprintf("reduce: length mismatch dst=%d a=%d b=%d", len(dst), len(a), len(b)))
	}
	if len(dst) == 0 {
		return
	}
	if op == Avg {
		op = Sum
	}
	if !dt.Valid() {
		panic(fmt.Sprintf("reduce: invalid dtype %v", dt))
	}
	if op < Sum || op > Max {
		panic(fmt.Sprintf("reduce: invalid op %v", op))
	}
	if len(dst)%dt.Size() != 0 {
		panic(fmt.Sprintf("reduce: length %d is not a multiple of the %v size %d", len(dst), dt, dt.Size()))
	}
	// The vector kernel takes the whole blocks, the generic code the tail
	// (at most blockSize-1 bytes, always whole elements).
	if k := binaryKernels[dt][op]; k != nil && useAsm && len(dst) >= blockSize {
		// Stores that straddle cache lines cost up to 25% while the
		// buffers fit in L2, so let the generic code do the few elements
		// up to an aligned dst first, where that is worth a second call.
		head := int(-uintptr(unsafe.Pointer(&dst[0])) & (blockSize - 1))
		if head > 0 && len(dst) >= alignMin && head%dt.Size() == 0 {
			genericReduceTo(dt, op, dst[:head], a[:head], b[:head])
			dst, a, b = dst[head:], a[head:], b[head:]
		}
		n := len(dst) &^ (blockSize - 1)
		k(&dst[0], &a[0], &b[0], n)
		if n == len(dst) {
			return
		}
		dst, a, b = dst[n:], a[n:], b[n:]
	}
	genericReduceTo(dt, op, dst, a, b)
}

// Finish completes a reduction on a fully reduced buffer: for Avg it divides
// every element by n; other operators are already complete.
func Finish(dt DType, op Op, buf []byte, n int) {
	if op != Avg || n <= 1 || len(buf) == 0 || !dt.Valid() {
		return
	}
	if m := len(buf) &^ (blockSize - 1); m > 0 && useAsm {
		if k := divKernels[dt]; k != nil {
			k(&buf[0], m, float64(n))
			if m == len(buf) {
				return
			}
			buf = buf[m:]
		}
	}
	genericFinish(dt, buf, n)
}

// blockSize is the granularity of the vector kernels, in bytes: one 256-bit
// register. It is a multiple of every element size.
const blockSize = 32

// alignMin is the length from which ReduceTo aligns dst for the kernels.
const alignMin = 1024

// A binaryKernel computes dst = a op b over n bytes, n a positive multiple of
// blockSize; dst may alias a or b exactly. A divKernel divides n bytes of buf
// in place by d (Finish for Avg).
type (
	binaryKernel func(dst, a, b *byte, n int)
	divKernel    func(buf *byte, n int, d float64)
)

// The vector kernels of this CPU, filled in by init on amd64 (see
// kernels_amd64.go); a nil entry falls back to the generic Go code, which is
// also the only code on other architectures and with the purego build tag.
var (
	binaryKernels [BFloat16 + 1][Max + 1]binaryKernel
	divKernels    [BFloat16 + 1]divKernel
	asmImpl       string // the instruction set of the kernels, "" for none

	// useAsm can be cleared by tests to compare with the generic code.
	useAsm = true
)

// view reinterprets a byte buffer as a slice of T without copying.
func view[T any](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// Bytes reinterprets a slice of elements as bytes without copying.
func Bytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}
