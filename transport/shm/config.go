package shm

import (
	"fmt"
	"math/bits"
	"runtime"
	"time"
)

// Config configures one rank's Transport. Every rank of a job must use the
// same Size, RingBytes, NativeBytes, Dir and Prefix.
type Config struct {
	Rank, Size int
	// JobID names the job in errors and logs. Segments are named by a
	// random token rank 0 draws in Connect, so jobs never share segments
	// even with the same JobID.
	JobID string
	// Dir is the directory of the shared-memory segments, a tmpfs. Empty
	// means /dev/shm.
	Dir string
	// Prefix is the store key prefix of this transport's rendezvous, so that
	// several shm transports (one per node of a hierarchical job) can meet
	// through one store. Empty means "shm".
	Prefix string
	// RingBytes is the size of the ring each rank has for each peer and
	// direction, rounded up to a power of two. A message larger than the
	// ring streams through it. Zero means DefaultRingBytes.
	RingBytes int
	// NativeBytes is the shared buffer each rank has for the native
	// all-reduce (AllReduce), used as two halves so that one chunk can be
	// filled while the other is reduced: a chunk is half of it. A chunk's
	// input, output and shared halves should fit in a core's cache (see
	// DefaultNativeBytes). Zero means DefaultNativeBytes;
	// negative disables the native all-reduce (AllReduce returns
	// ErrNoNative).
	NativeBytes int
	// Spin is how many times a waiting rank polls before it starts yielding
	// its CPU. Zero means DefaultSpin when the ranks have a core each
	// (Size <= runtime.NumCPU()) and OversubscribedSpin when they do not:
	// then a spinning rank holds the core the rank it waits for needs.
	// Negative means no polling.
	Spin int
	// Yield is how long a waiting rank keeps polling between sched_yield
	// calls after spinning, before it sleeps on a futex in the segment. Zero
	// learns it per link (and for the native all-reduce's barriers) from
	// how long the recent waits there took and what its sleeps cost
	// (internal/spin: twice the longest recent wait, 50 us to 1 ms, 20 us
	// while waits average longer, and at least 4 times what recent sleeps
	// cost, up to 10 ms); positive fixes it; negative means none.
	Yield time.Duration
	// LivenessInterval is how often a sleeping rank checks that the process
	// it waits for is still alive (kill(pid, 0)), to turn a crashed peer
	// into ErrPeerGone instead of a wait until the deadline. Zero means
	// DefaultLivenessInterval.
	LivenessInterval time.Duration
	// Stores is how a rank writes the shared memory its peers read next
	// (ring messages from 4 KiB up, and the native all-reduce's buffer).
	// The zero value, StoresAuto, measures both kinds at Connect and keeps
	// the faster (Transport.Streaming says which).
	Stores Stores
}

// Stores is how a rank writes what its peers read next.
type Stores int

const (
	// StoresAuto times streaming and ordinary stores at Connect: each rank
	// fills its right neighbour's ring and reads its left one's, a few
	// times each way, and keeps the faster. Streaming (non-temporal)
	// stores write whole lines to memory without taking them back from
	// the cache of the core that read them last: on a 2-core AMD EPYC VM
	// that halved a 256 KiB native all-reduce, while on a 2-core Intel
	// Xeon VM it doubled it, since there the reader finds ordinary stores
	// in the shared cache.
	StoresAuto Stores = iota
	// StoresStreaming always streams (internal/stream) where the platform
	// can (amd64).
	StoresStreaming
	// StoresOrdinary always copies with ordinary stores.
	StoresOrdinary
)

func (s Stores) String() string {
	switch s {
	case StoresAuto:
		return "auto"
	case StoresStreaming:
		return "streaming"
	case StoresOrdinary:
		return "ordinary"
	}
	return fmt.Sprintf("Stores(%d)", int(s))
}

// Defaults of Config.
const (
	DefaultRingBytes = 1 << 20
	// DefaultNativeBytes makes chunks of 512 KiB, whose buffers stay in a
	// core's L2 cache from one step of the chunk to the next. 2-core Xeon
	// VM (L2 4 MiB a core), native all-reduce of 4 MiB, medians of
	// alternating runs, chunks of 4 MiB (the default was 8 MiB) against
	// 512 KiB: np 2, 1533 and 1298 us a call; np 4, 4186 and 3253; np 8,
	// 7922 and 7137.
	DefaultNativeBytes      = 1 << 20
	DefaultSpin             = 5000
	OversubscribedSpin      = 10
	DefaultLivenessInterval = 100 * time.Millisecond
	DefaultDir              = "/dev/shm"
	DefaultPrefix           = "shm"

	// MinRingBytes and MaxRingBytes bound Config.RingBytes.
	MinRingBytes = 4 << 10
	MaxRingBytes = 1 << 30
	// MaxSize is the largest world Size: every rank maps every other's
	// segment.
	MaxSize = 256
)

func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("shm: invalid config for rank %d: "+format, append([]any{c.Rank}, args...)...)
	}
	switch {
	case c.Size < 1 || c.Size > MaxSize:
		return bad("Size %d: want 1 to %d ranks", c.Size, MaxSize)
	case c.Rank < 0 || c.Rank >= c.Size:
		return bad("Rank must be in [0, %d)", c.Size)
	case c.RingBytes < 0 || c.RingBytes > MaxRingBytes:
		return bad("RingBytes %d: want 0 (meaning %d) to %d", c.RingBytes, DefaultRingBytes, MaxRingBytes)
	case c.NativeBytes > 1<<34:
		return bad("NativeBytes %d is larger than 16 GiB", c.NativeBytes)
	case c.Stores < StoresAuto || c.Stores > StoresOrdinary:
		return bad("Stores %d: want StoresAuto, StoresStreaming or StoresOrdinary", c.Stores)
	case c.LivenessInterval < 0:
		return bad("LivenessInterval %v is negative", c.LivenessInterval)
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.RingBytes == 0 {
		c.RingBytes = DefaultRingBytes
	}
	c.RingBytes = max(c.RingBytes, MinRingBytes)
	c.RingBytes = 1 << bits.Len(uint(c.RingBytes-1)) // next power of two
	switch {
	case c.NativeBytes == 0:
		c.NativeBytes = DefaultNativeBytes
	case c.NativeBytes < 0:
		c.NativeBytes = 0
	default:
		// Two halves of whole 64-byte lines, room for any element size.
		c.NativeBytes = max(c.NativeBytes, 256) &^ 127
	}
	switch {
	case c.Spin == 0 && c.Size <= runtime.NumCPU():
		c.Spin = DefaultSpin
	case c.Spin == 0:
		c.Spin = OversubscribedSpin
	case c.Spin < 0:
		c.Spin = 0
	}
	if c.LivenessInterval == 0 {
		c.LivenessInterval = DefaultLivenessInterval
	}
	return c, nil
}
