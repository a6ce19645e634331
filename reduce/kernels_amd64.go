//go:build amd64 && !purego

package reduce

import "golang.org/x/sys/cpu"

// Assembly loops in kernels_amd64.s. Each one handles n bytes, n a positive
// multiple of blockSize; dst may alias a or b exactly.

//go:noescape
func sumF32(dst, a, b *byte, n int)

//go:noescape
func prodF32(dst, a, b *byte, n int)

//go:noescape
func minF32(dst, a, b *byte, n int)

//go:noescape
func maxF32(dst, a, b *byte, n int)

//go:noescape
func sumF64(dst, a, b *byte, n int)

//go:noescape
func prodF64(dst, a, b *byte, n int)

//go:noescape
func minF64(dst, a, b *byte, n int)

//go:noescape
func maxF64(dst, a, b *byte, n int)

//go:noescape
func sumI32(dst, a, b *byte, n int)

//go:noescape
func prodI32(dst, a, b *byte, n int)

//go:noescape
func minI32(dst, a, b *byte, n int)

//go:noescape
func maxI32(dst, a, b *byte, n int)

//go:noescape
func sumI64(dst, a, b *byte, n int)

//go:noescape
func prodI64(dst, a, b *byte, n int)

//go:noescape
func minI64(dst, a, b *byte, n int)

//go:noescape
func maxI64(dst, a, b *byte, n int)

//go:noescape
func sumU8(dst, a, b *byte, n int)

//go:noescape
func prodU8(dst, a, b *byte, n int)

//go:noescape
func minU8(dst, a, b *byte, n int)

//go:noescape
func maxU8(dst, a, b *byte, n int)

//go:noescape
func sumF16(dst, a, b *byte, n int)

//go:noescape
func prodF16(dst, a, b *byte, n int)

//go:noescape
func minF16(dst, a, b *byte, n int)

//go:noescape
func maxF16(dst, a, b *byte, n int)

//go:noescape
func sumBF16(dst, a, b *byte, n int)

//go:noescape
func prodBF16(dst, a, b *byte, n int)

//go:noescape
func minBF16(dst, a, b *byte, n int)

//go:noescape
func maxBF16(dst, a, b *byte, n int)

//go:noescape
func divF32(buf *byte, n int, d float64)

//go:noescape
func divF64(buf *byte, n int, d float64)

//go:noescape
func divF16(buf *byte, n int, d float64)

//go:noescape
func divBF16(buf *byte, n int, d float64)

func init() {
	if !cpu.X86.HasAVX2 {
		return // the generic Go code does everything
	}
	asmImpl = "avx2"
	binaryKernels = [...][Max + 1]binaryKernel{
		Float32: {Sum: sumF32, Prod: prodF32, Min: minF32, Max: maxF32},
		Float64: {Sum: sumF64, Prod: prodF64, Min: minF64, Max: maxF64},
		Int32:   {Sum: sumI32, Prod: prodI32, Min: minI32, Max: maxI32},
		Int64:   {Sum: sumI64, Min: minI64, Max: maxI64},
		Uint8:   {Sum: sumU8, Prod: prodU8, Min: minU8, Max: maxU8},
		// BF16 widening and rounding is plain integer AVX2.
		BFloat16: {Sum: sumBF16, Prod: prodBF16, Min: minBF16, Max: maxBF16},
	}
	divKernels = [...]divKernel{Float32: divF32, Float64: divF64, BFloat16: divBF16}
	if cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL {
		binaryKernels[Int64][Prod] = prodI64 // VPMULLQ
	}
	if cpu.X86.HasF16C {
		binaryKernels[Float16] = [Max + 1]binaryKernel{Sum: sumF16, Prod: prodF16, Min: minF16, Max: maxF16}
		divKernels[Float16] = divF16
	}
}
