package bootstrap

import (
	"context"
	"errors"
	"testing"
)

// The Store contract, Create and Add included, is checked by storetest
// (store_test.go); here what only MemStore promises.

func TestCreateAddUnsupported(t *testing.T) {
	ctx := context.Background()
	s := struct{ Store }{NewMemStore()} // hides Create and Add
	if _, err := Create(ctx, s, "x", nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Create on a store without it = %v, want ErrUnsupported", err)
	}
	if _, err := Add(ctx, WithPrefix(s, "p/"), "x", 1); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Add through WithPrefix on a store without it = %v, want ErrUnsupported", err)
	}
}
