package nccl

import (
	"os"
	"testing"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// fakeDir holds the fake library the binding tests build; TestMain removes it.
var fakeDir string

func mkdirTemp() (string, error) {
	d, err := os.MkdirTemp("", "collkit-fake-nccl-")
	fakeDir = d
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}

// header is the header of a native collective of count elements of dt
// (all ranks' elements for all-gather and reduce-scatter), op and root.
func header(count int, dt reduce.DType, op reduce.Op, root int) transport.Header {
	return transport.Header{Count: uint64(count), DType: dt, Op: op, Root: int32(root)}
}

func newStore() bootstrap.Store { return bootstrap.NewMemStore() }
