#include "textflag.h"

// The value is each atomic type's first word: sync/atomic's types hold
// only zero-size markers before it.

// func Uint64(p *atomic.Uint64, v uint64)
TEXT ·Uint64(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, 0(AX)
	RET

// func Uint32(p *atomic.Uint32, v uint32)
TEXT ·Uint32(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, 0(AX)
	RET
