//go:build linux && !amd64

package shm

import "sync/atomic"

// storeRelease is atomic's Store where no release-only store is wired up
// (see release_amd64.go).
func storeRelease(p *atomic.Uint64, v uint64) { p.Store(v) }
