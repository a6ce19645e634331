//go:build amd64 && !purego

#include "textflag.h"

// func streamLines(dst, src *byte, n int)
// Unaligned 16-byte loads, aligned 16-byte streaming stores (MOVNTO is
// MOVNTDQ), four per 64-byte line, so that each line leaves the
// write-combining buffer whole; SFENCE orders them before later stores.
TEXT ·streamLines(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

loop:
	MOVOU  0(SI), X0
	MOVOU  16(SI), X1
	MOVOU  32(SI), X2
	MOVOU  48(SI), X3
	MOVNTO X0, 0(DI)
	MOVNTO X1, 16(DI)
	MOVNTO X2, 32(DI)
	MOVNTO X3, 48(DI)
	ADDQ   $64, SI
	ADDQ   $64, DI
	SUBQ   $64, CX
	JNZ    loop
	SFENCE
	RET
