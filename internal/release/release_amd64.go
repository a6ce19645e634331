package release

import "sync/atomic"

// Uint64 stores v in *p with release order (a MOV on x86).
//
//go:noescape
func Uint64(p *atomic.Uint64, v uint64)

// Int64 stores v in *p with release order.
//
//go:noescape
func Int64(p *atomic.Int64, v int64)

// Uint32 stores v in *p with release order.
//
//go:noescape
func Uint32(p *atomic.Uint32, v uint32)

// Bool stores v in *p with release order.
func Bool(p *atomic.Bool, v bool) {
	var u uint32
	if v {
		u = 1
	}
	boolWord(p, u)
}

//go:noescape
func boolWord(p *atomic.Bool, v uint32)
