package reduce

import "math"

// The portable implementation: the reference for the vector kernels, the tail
// after their last whole block, and everything on CPUs without them. The
// loops are unrolled by four, which the Go compiler does not do by itself and
// which is worth about 20% on amd64.

// genericReduceTo is ReduceTo in Go; dt and op (not Avg) are valid.
func genericReduceTo(dt DType, op Op, dst, a, b []byte) {
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
	case Float16, BFloat16:
		apply16(op, dt == BFloat16, view[uint16](dst), view[uint16](a), view[uint16](b))
	}
}

type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

func apply[T number](op Op, dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	switch op {
	case Sum:
		for ; i+4 <= n; i += 4 {
			d, x, y := dst[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
			d[0], d[1], d[2], d[3] = x[0]+y[0], x[1]+y[1], x[2]+y[2], x[3]+y[3]
		}
		for ; i < n; i++ {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for ; i+4 <= n; i += 4 {
			d, x, y := dst[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
			d[0], d[1], d[2], d[3] = x[0]*y[0], x[1]*y[1], x[2]*y[2], x[3]*y[3]
		}
		for ; i < n; i++ {
			dst[i] = a[i] * b[i]
		}
	case Min:
		for ; i+4 <= n; i += 4 {
			d, x, y := dst[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
			d[0], d[1], d[2], d[3] = min(x[0], y[0]), min(x[1], y[1]), min(x[2], y[2]), min(x[3], y[3])
		}
		for ; i < n; i++ {
			dst[i] = min(a[i], b[i])
		}
	case Max:
		for ; i+4 <= n; i += 4 {
			d, x, y := dst[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
			d[0], d[1], d[2], d[3] = max(x[0], y[0]), max(x[1], y[1]), max(x[2], y[2]), max(x[3], y[3])
		}
		for ; i < n; i++ {
			dst[i] = max(a[i], b[i])
		}
	}
}

// halfBlock is how many 16-bit floats apply16 widens at a time into float32
// buffers on the stack, so that the conversions and the operator each run as a
// tight loop instead of one call per element. 64 is enough for that and keeps
// the buffers cheap to clear for short calls.
const halfBlock = 64

// apply16 computes dst = a op b on float16 (bf false) or bfloat16 values: in
// float32, rounded to nearest even after the operation.
func apply16(op Op, bf bool, dst, a, b []uint16) {
	var x, y [halfBlock]float32
	for len(dst) > 0 {
		n := min(len(dst), halfBlock)
		widen(bf, x[:n], a[:n])
		widen(bf, y[:n], b[:n])
		apply(op, x[:n], x[:n], y[:n])
		narrow(bf, dst[:n], x[:n])
		dst, a, b = dst[n:], a[n:], b[n:]
	}
}

func widen(bf bool, dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if bf {
		for i, h := range src {
			dst[i] = BF16ToF32(h)
		}
		return
	}
	for i, h := range src {
		f, ok := f16ToF32Normal(h)
		if !ok {
			f = f16ToF32Special(h)
		}
		dst[i] = f
	}
}

func narrow(bf bool, dst []uint16, src []float32) {
	dst = dst[:len(src)]
	if bf {
		for i, f := range src {
			dst[i] = F32ToBF16(f)
		}
		return
	}
	for i, f := range src {
		h, ok := f32ToF16Normal(f)
		if !ok {
			h = f32ToF16Special(f)
		}
		dst[i] = h
	}
}

// genericFinish divides every element of buf by n > 1; integers truncate.
func genericFinish(dt DType, buf []byte, n int) {
	switch dt {
	case Float32:
		s := view[float32](buf)
		d := float32(n)
		for i, v := range s {
			s[i] = v / d
		}
	case Float64:
		s := view[float64](buf)
		d := float64(n)
		for i, v := range s {
			s[i] = v / d
		}
	case Int32:
		s := view[int32](buf)
		if n > math.MaxInt32 { // int32(n) would wrap
			for i, v := range s {
				s[i] = int32(int64(v) / int64(n))
			}
			return
		}
		d := int32(n) // 32-bit division is faster than 64-bit
		for i, v := range s {
			s[i] = v / d
		}
	case Int64:
		s := view[int64](buf)
		for i, v := range s {
			s[i] = v / int64(n)
		}
	case Uint8:
		// Division is slow and there are only 256 quotients. (v / uint8(n)
		// would also be wrong for n > 255.)
		var q [256]uint8
		for v := range q {
			q[v] = uint8(v / n)
		}
		for i, v := range buf {
			buf[i] = q[v]
		}
	case Float16, BFloat16:
		bf := dt == BFloat16
		s := view[uint16](buf)
		d := float32(n)
		var x [halfBlock]float32
		for len(s) > 0 {
			m := min(len(s), halfBlock)
			widen(bf, x[:m], s[:m])
			for i := range x[:m] {
				x[i] /= d
			}
			narrow(bf, s[:m], x[:m])
			s = s[m:]
		}
	}
}
