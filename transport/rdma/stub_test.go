//go:build !rdma

package rdma_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/collkit/collkit/transport/rdma"
)

func TestStubSaysHowToBuild(t *testing.T) {
	if rdma.Built {
		t.Fatal("Built is true in a build without the rdma tag")
	}
	_, err := rdma.New(rdma.Config{Size: 1})
	if !errors.Is(err, rdma.ErrNotBuilt) {
		t.Fatalf("New = %v, want ErrNotBuilt", err)
	}
	for _, want := range []string{"built without RDMA support", "-tags rdma", "libucx-dev"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := rdma.Local(context.Background(), 2, rdma.Config{}); !errors.Is(err, rdma.ErrNotBuilt) {
		t.Errorf("Local = %v, want ErrNotBuilt", err)
	}
}
