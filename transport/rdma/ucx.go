//go:build rdma

package rdma

// #cgo LDFLAGS: -lucp -lucs
// #include <stdlib.h>
// #include <ucp/api/ucp.h>
// #include "ck.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"
)

// ucsError is a UCX status code as an error.
type ucsError C.ucs_status_t

func (e ucsError) Error() string {
	return "ucx: " + C.GoString(C.ucs_status_string(C.ucs_status_t(e)))
}

// errUCS converts a status to an error, nil for UCS_OK.
func errUCS(st C.ucs_status_t) error {
	if st == C.UCS_OK {
		return nil
	}
	return ucsError(st)
}

func isStatus(err error, st C.ucs_status_t) bool {
	var e ucsError
	return errors.As(err, &e) && C.ucs_status_t(e) == st
}

// cstr returns a C copy of s, or nil for "".
func cstr(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

func freeCStr(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

// ucxTime formats d as a UCX time value.
func ucxTime(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("%dus", d.Microseconds())
}

// staging is a registered buffer (ucp_mem_map) that a message is copied
// through; staging buffers are kept in a pool and reused.
type staging struct {
	memh C.ucp_mem_h
	addr unsafe.Pointer
	size int
}

func (s *staging) bytes(n int) []byte { return unsafe.Slice((*byte)(s.addr), n) }

// op is a reusable slot for one outstanding send or receive.
type op struct {
	c   *C.ck_op       // C memory, so UCX may keep pointers into it
	pin runtime.Pinner // holds a zero-copy payload in place while UCX uses it
}

func newOp() *op { return &op{c: (*C.ck_op)(C.calloc(1, C.sizeof_ck_op))} }

func (o *op) free() { C.free(unsafe.Pointer(o.c)) }

func (o *op) done() bool { return o.c.done != 0 }

func (o *op) err() error { return errUCS(o.c.status) }
