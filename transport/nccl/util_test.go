package nccl

import (
	"os"
	"testing"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// fakeDirs hold the fake libraries the binding tests build; TestMain
// removes them.
var fakeDirs []string

func mkdirTemp() (string, error) {
	d, err := os.MkdirTemp("", "collkit-fake-nccl-")
	if err == nil {
		fakeDirs = append(fakeDirs, d)
	}
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range fakeDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// header is the header of a native collective of count elements of dt
// (all ranks' elements for all-gather and reduce-scatter), op and root.
func header(count int, dt reduce.DType, op reduce.Op, root int) transport.Header {
	return transport.Header{Count: uint64(count), DType: dt, Op: op, Root: int32(root)}
}

func newStore() bootstrap.Store { return bootstrap.NewMemStore() }
