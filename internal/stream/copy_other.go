//go:build !amd64 || purego

package stream

// available: elsewhere Copy is copy.
const available = false

func streamLines(dst, src *byte, n int) { panic("stream: no streaming stores on this platform") }

func headBytes(dst []byte) int { return 0 }
