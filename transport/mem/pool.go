package mem

import "github.com/collkit/collkit/internal/bufpool"

// Payload copies come from the shared pools of internal/bufpool, so a steady
// stream of messages allocates nothing once the pools are warm.

// getBuf returns a buffer of length n, or nil when n is 0.
func getBuf(n int) *bufpool.Buffer {
	if n == 0 {
		return nil
	}
	return bufpool.Get(n)
}

// putBuf recycles a buffer from getBuf; nil is ignored.
func putBuf(b *bufpool.Buffer) { bufpool.Put(b) }
