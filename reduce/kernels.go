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
	switch dt {
	case Float32:
		apply(op, view[float32](dst), view[float32](a), view[float32](b))
	case Float64:
		apply(op, view[float64](dst), view[float64](a), view[float64](b))
	case Int32:
		apply(op, view[int32](dst), view[int32](a), view[int32](b))
	case Int64:
		apply(op, view[int64](dst), view[int64](a), view[int64](b))
	case Uint8:
		apply(op, dst, a, b)
	case Float16:
		apply16(op, view[uint16](dst), view[uint16](a), view[uint16](b), F16ToF32, F32ToF16)
	case BFloat16:
		apply16(op, view[uint16](dst), view[uint16](a), view[uint16](b), BF16ToF32, F32ToBF16)
	default:
		panic(fmt.Sprintf("reduce: invalid dtype %v", dt))
	}
}

// Finish completes a reduction on a fully reduced buffer: for Avg it divides
// every element by n; other operators are already complete.
func Finish(dt DType, op Op, buf []byte, n int) {
	if op != Avg || n <= 1 || len(buf) == 0 {
		return
	}
	switch dt {
	case Float32:
		for i, v := range view[float32](buf) {
			view[float32](buf)[i] = v / float32(n)
		}
	case Float64:
		s := view[float64](buf)
		for i, v := range s {
			s[i] = v / float64(n)
		}
	case Int32:
		s := view[int32](buf)
		for i, v := range s {
			s[i] = v / int32(n)
		}
	case Int64:
		s := view[int64](buf)
		for i, v := range s {
			s[i] = v / int64(n)
		}
	case Uint8:
		for i, v := range buf {
			buf[i] = v / uint8(n)
		}
	case Float16:
		s := view[uint16](buf)
		for i, v := range s {
			s[i] = F32ToF16(F16ToF32(v) / float32(n))
		}
	case BFloat16:
		s := view[uint16](buf)
		for i, v := range s {
			s[i] = F32ToBF16(BF16ToF32(v) / float32(n))
		}
	}
}

type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

func apply[T number](op Op, dst, a, b []T) {
	b = b[:len(dst)]
	a = a[:len(dst)]
	switch op {
	case Sum:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	default:
		panic(fmt.Sprintf("reduce: invalid op %v", op))
	}
}

func apply16(op Op, dst, a, b []uint16, load func(uint16) float32, store func(float32) uint16) {
	b = b[:len(dst)]
	a = a[:len(dst)]
	for i := range dst {
		x, y := load(a[i]), load(b[i])
		var r float32
		switch op {
		case Sum:
			r = x + y
		case Prod:
			r = x * y
		case Min:
			r = min(x, y)
		case Max:
			r = max(x, y)
		default:
			panic(fmt.Sprintf("reduce: invalid op %v", op))
		}
		dst[i] = store(r)
	}
}

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
