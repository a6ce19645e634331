//go:build amd64 && !purego

#include "textflag.h"

// AVX2 loops for Reduce, ReduceTo and Finish; see kernels_amd64.go.
//
// Every kernel has the shape func(dst, a, b *byte, n int): it computes
// dst = a op b over n bytes, n a positive multiple of 32, with unaligned loads
// and stores, so dst may alias a or b exactly. The Go caller does the tail.
//
// The file is built from three kinds of macro, so that each kernel is one
// line instead of a copy of the whole loop:
//
//   - an OP(y, x, z) macro computes z = x op y on YMM registers (Plan 9
//     operand order). It may clobber Y4-Y7 and reads constants from Y8-Y15,
//     which the kernel sets up before its loop.
//   - a UNIT(OP, o) macro does one 32-byte block at byte offset o: it loads
//     the operands from a (SI) and b (DX) into Y0-Y3, applies OP and stores
//     to dst (DI); between OPs it may also use Y4-Y5.
//     VEC works on any element type the vector op understands; F16 and BF16
//     widen 16 halves to two float32 vectors, apply OP there and narrow back
//     with round to nearest even.
//   - LOOP(UNIT, OP) runs UNIT over the buffer, four blocks (128 bytes) per
//     iteration while it can, then one block at a time.
//
// 256-bit vectors already run at the speed of L2 and memory (float32 sum:
// 55 GB/s from L2 on the Xeon this was written on, 15 GB/s for 4 MiB). A
// 512-bit loop measured 3% slower from L2, the same at 4 MiB and about 5%
// faster at 64 MiB, which is within the noise of a shared machine and not
// worth a second set of kernels, so AVX-512 is only used for the one
// instruction AVX2 lacks (VPMULLQ). Neither did more unrolling or software
// prefetching help.

// ---- operators: z = x op y --------------------------------------------------

#define ADDPS(y, x, z) VADDPS y, x, z
#define MULPS(y, x, z) VMULPS y, x, z
#define ADDPD(y, x, z) VADDPD y, x, z
#define MULPD(y, x, z) VMULPD y, x, z
#define ADDD(y, x, z) VPADDD y, x, z
#define MULD(y, x, z) VPMULLD y, x, z
#define MIND(y, x, z) VPMINSD y, x, z
#define MAXD(y, x, z) VPMAXSD y, x, z
#define ADDQ_(y, x, z) VPADDQ y, x, z
#define MULQ_(y, x, z) VPMULLQ y, x, z
#define ADDB(y, x, z) VPADDB y, x, z
#define MINB(y, x, z) VPMINUB y, x, z
#define MAXB(y, x, z) VPMAXUB y, x, z

// Go's min and max on floats return NaN if either input is NaN and order -0
// below +0. VMINPS/VMAXPS instead return their second source (Intel order:
// y in "VMINPS y, x, z") when either input is NaN or both are zero, so take
// both operand orders: for min, OR of
// the two keeps a NaN (all-ones exponent, non-zero mantissa) and the sign of
// -0; for max, AND clears the sign of -0, and OR with the unordered mask turns
// a NaN lane into all ones, a NaN.
#define FMIN(MIN, OR, y, x, z) MIN y, x, Y4; MIN x, y, z; OR Y4, z, z
#define FMAX(MAX, AND, OR, CMP, y, x, z) MAX y, x, Y4; CMP $3, y, x, Y5; MAX x, y, z; AND Y4, z, z; OR Y5, z, z
#define MINPS(y, x, z) FMIN(VMINPS, VORPS, y, x, z)
#define MAXPS(y, x, z) FMAX(VMAXPS, VANDPS, VORPS, VCMPPS, y, x, z)
#define MINPD(y, x, z) FMIN(VMINPD, VORPD, y, x, z)
#define MAXPD(y, x, z) FMAX(VMAXPD, VANDPD, VORPD, VCMPPD, y, x, z)

// Signed 64-bit min and max: AVX2 has the compare but not the min.
#define MINQ(y, x, z) VPCMPGTQ y, x, Y4; VPBLENDVB Y4, y, x, z
#define MAXQ(y, x, z) VPCMPGTQ y, x, Y4; VPBLENDVB Y4, x, y, z

// Wrapping uint8 product from 16-bit products: the even bytes are the low
// bytes of x*y per word; the odd bytes are (x>>8)*(y>>8) shifted back up.
// Y10 holds 0x00ff in every word.
#define MULB(y, x, z) VPMULLW y, x, Y4; VPSRLW $8, x, Y5; VPSRLW $8, y, Y6; VPMULLW Y6, Y5, Y5; VPSLLW $8, Y5, Y5; VPAND Y10, Y4, Y4; VPOR Y5, Y4, z

// Finish: divide by the broadcast divisor in Y11, ignoring y.
#define DIVPS(y, x, z) VDIVPS Y11, x, z
#define DIVPD(y, x, z) VDIVPD Y11, x, z

// ---- units: one 32-byte block at offset o ---------------------------------

// VEC passes b as a memory operand, which only single-instruction operators
// accept; VECR loads it into a register first, for the others. Fewer
// instructions per cache line let the core keep more loads in flight, which
// was measured to matter beyond L2 (up to 15% at 64 MiB).
#define VEC(OP, o) VMOVUPS o(SI), Y0; OP(o(DX), Y0, Y0); VMOVUPS Y0, o(DI)
#define VECR(OP, o) VMOVUPS o(SI), Y0; VMOVUPS o(DX), Y1; OP(Y1, Y0, Y0); VMOVUPS Y0, o(DI)

// 16 binary16 values: F16C converts exactly to float32 and back with round
// to nearest even (imm8 0), like F16ToF32 and F32ToF16; Go leaves MXCSR at
// its default, so subnormals are not flushed.
#define F16(OP, o) \
	VCVTPH2PS o(SI), Y0; VCVTPH2PS o+16(SI), Y2; \
	VCVTPH2PS o(DX), Y1; VCVTPH2PS o+16(DX), Y3; \
	OP(Y1, Y0, Y0); OP(Y3, Y2, Y2); \
	VCVTPS2PH $0, Y0, o(DI); VCVTPS2PH $0, Y2, o+16(DI)

// 16 bfloat16 values. Interleaving words with zero (Y15) widens them to
// float32 bits, lanes ordered 0-3,8-11 (low) and 4-7,12-15 (high); VPACKUSDW
// undoes exactly that order. BF16ROUND narrows float32 bits in x to bfloat16
// in the low half of each dword, bit for bit like F32ToBF16: add 0x7fff plus
// the lowest kept bit (Y14 = 1, Y13 = 0x7fff), except NaN, which is made
// quiet with 0x400000 (Y12).
#define BF16ROUND(x) \
	VCMPPS $3, x, x, Y5; \
	VPSRLD $16, x, Y4; VPAND Y14, Y4, Y4; VPADDD Y13, Y4, Y4; VPADDD x, Y4, Y4; \
	VPOR Y12, x, x; \
	VPBLENDVB Y5, x, Y4, x; \
	VPSRLD $16, x, x

#define BF16(OP, o) \
	VMOVDQU o(SI), Y4; VPUNPCKLWD Y4, Y15, Y0; VPUNPCKHWD Y4, Y15, Y2; \
	VMOVDQU o(DX), Y4; VPUNPCKLWD Y4, Y15, Y1; VPUNPCKHWD Y4, Y15, Y3; \
	OP(Y1, Y0, Y0); OP(Y3, Y2, Y2); \
	BF16ROUND(Y0); BF16ROUND(Y2); \
	VPACKUSDW Y2, Y0, Y0; VMOVDQU Y0, o(DI)

// ---- the loop ---------------------------------------------------------------

#define ARGS \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX

// The Finish kernels read and write buf, so a and b both point at it.
#define DIVARGS \
	MOVQ buf+0(FP), DI; \
	MOVQ DI, SI; \
	MOVQ DI, DX; \
	MOVQ n+8(FP), CX

#define LOOP(UNIT, OP) \
	SUBQ $128, CX; \
	JL   one; \
four: \
	UNIT(OP, 0); UNIT(OP, 32); UNIT(OP, 64); UNIT(OP, 96); \
	ADDQ $128, SI; ADDQ $128, DX; ADDQ $128, DI; \
	SUBQ $128, CX; \
	JGE  four; \
one: \
	ADDQ $128, CX; \
	JZ   done; \
loop1: \
	UNIT(OP, 0); \
	ADDQ $32, SI; ADDQ $32, DX; ADDQ $32, DI; \
	SUBQ $32, CX; \
	JNZ  loop1; \
done: \
	VZEROUPPER; \
	RET

// Constants, broadcast from a general register.
#define BCAST32(v, Y) MOVL v, AX; MOVQ AX, X7; VPBROADCASTD X7, Y

// ---- kernels ----------------------------------------------------------------

TEXT ·sumF32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, ADDPS)

TEXT ·prodF32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MULPS)

TEXT ·minF32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VECR, MINPS)

TEXT ·maxF32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VECR, MAXPS)

TEXT ·sumF64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, ADDPD)

TEXT ·prodF64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MULPD)

TEXT ·minF64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VECR, MINPD)

TEXT ·maxF64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VECR, MAXPD)

TEXT ·sumI32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, ADDD)

TEXT ·prodI32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MULD)

TEXT ·minI32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MIND)

TEXT ·maxI32(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MAXD)

TEXT ·sumI64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, ADDQ_)

// Needs AVX512DQ and AVX512VL.
TEXT ·prodI64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MULQ_)

TEXT ·minI64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VECR, MINQ)

TEXT ·maxI64(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VECR, MAXQ)

TEXT ·sumU8(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, ADDB)

TEXT ·prodU8(SB), NOSPLIT, $0-32
	ARGS
	MOVL $0x00ff, AX
	MOVQ AX, X7
	VPBROADCASTW X7, Y10
	LOOP(VECR, MULB)

TEXT ·minU8(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MINB)

TEXT ·maxU8(SB), NOSPLIT, $0-32
	ARGS
	LOOP(VEC, MAXB)

// Needs F16C.
TEXT ·sumF16(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, ADDPS)

TEXT ·prodF16(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, MULPS)

TEXT ·minF16(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, MINPS)

TEXT ·maxF16(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, MAXPS)

#define BF16CONST \
	VPXOR Y15, Y15, Y15; \
	BCAST32($1, Y14); \
	BCAST32($0x7fff, Y13); \
	BCAST32($0x400000, Y12)

TEXT ·sumBF16(SB), NOSPLIT, $0-32
	ARGS
	BF16CONST
	LOOP(BF16, ADDPS)

TEXT ·prodBF16(SB), NOSPLIT, $0-32
	ARGS
	BF16CONST
	LOOP(BF16, MULPS)

TEXT ·minBF16(SB), NOSPLIT, $0-32
	ARGS
	BF16CONST
	LOOP(BF16, MINPS)

TEXT ·maxBF16(SB), NOSPLIT, $0-32
	ARGS
	BF16CONST
	LOOP(BF16, MAXPS)

// Finish kernels: func(buf *byte, n int, d float64) divide n bytes of buf in
// place by d (converted to float32 for the 32-bit and 16-bit types).
TEXT ·divF32(SB), NOSPLIT, $0-24
	DIVARGS
	VCVTSD2SS d+16(FP), X11, X11
	VBROADCASTSS X11, Y11
	LOOP(VEC, DIVPS)

TEXT ·divF64(SB), NOSPLIT, $0-24
	DIVARGS
	VBROADCASTSD d+16(FP), Y11
	LOOP(VEC, DIVPD)

TEXT ·divF16(SB), NOSPLIT, $0-24
	DIVARGS
	VCVTSD2SS d+16(FP), X11, X11
	VBROADCASTSS X11, Y11
	LOOP(F16, DIVPS)

TEXT ·divBF16(SB), NOSPLIT, $0-24
	DIVARGS
	BF16CONST
	VCVTSD2SS d+16(FP), X11, X11
	VBROADCASTSS X11, Y11
	LOOP(BF16, DIVPS)
