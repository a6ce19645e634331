//go:build amd64 && !purego

package stream

import "unsafe"

// available: SSE2's MOVNTDQ is part of every amd64 processor.
const available = true

// streamLines copies n bytes, n a positive multiple of 64, from src to dst,
// dst 64-byte aligned, with streaming stores and a closing SFENCE.
//
//go:noescape
func streamLines(dst, src *byte, n int)

// headBytes is how many bytes of dst come before its first cache line.
func headBytes(dst []byte) int {
	return int(-uintptr(unsafe.Pointer(&dst[0])) & (lineBytes - 1))
}
