//go:build !amd64

package release

import "sync/atomic"

// Uint64 stores v in *p (sync/atomic's Store, which orders at least as
// much) where no release-only store is wired up.
func Uint64(p *atomic.Uint64, v uint64) { p.Store(v) }

// Int64 stores v in *p.
func Int64(p *atomic.Int64, v int64) { p.Store(v) }

// Uint32 stores v in *p.
func Uint32(p *atomic.Uint32, v uint32) { p.Store(v) }

// Bool stores v in *p.
func Bool(p *atomic.Bool, v bool) { p.Store(v) }
