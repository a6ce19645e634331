//go:build linux

package shm

import "sync/atomic"

// storeRelease stores v in *p with release order only: x86 orders a plain
// store after every earlier one, so the peers that see v see what this
// rank wrote before it. atomic's Store (XCHG) also waits for the line to
// come back from the peers' caches before this rank may read anything, and
// the rank that arrives last at a barrier then pays that wait before it can
// read the peers' data (np 2, 8 B: 0.44-0.47 us a call with XCHG,
// 0.41-0.44 with a plain store, in alternating runs).
//
//go:noescape
func storeRelease(p *atomic.Uint64, v uint64)
