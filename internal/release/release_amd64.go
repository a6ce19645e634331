package release

import (
	"sync/atomic"
	"unsafe"
)

// Uint64 stores v in *p with release order (a MOV on x86).
//
//go:noescape
func Uint64(p *atomic.Uint64, v uint64)

// Uint32 stores v in *p with release order.
//
//go:noescape
func Uint32(p *atomic.Uint32, v uint32)

// Int64 stores v in *p with release order: an Int64 is a Uint64's word.
func Int64(p *atomic.Int64, v int64) {
	Uint64((*atomic.Uint64)(unsafe.Pointer(p)), uint64(v))
}

// Bool stores v in *p with release order: a Bool is a Uint32's word, 0 or 1.
func Bool(p *atomic.Bool, v bool) {
	var u uint32
	if v {
		u = 1
	}
	Uint32((*atomic.Uint32)(unsafe.Pointer(p)), u)
}
