package bootstrap

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// testStore checks the Store contract on s.
func testStore(t *testing.T, s Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		v, err := s.Get(ctx, "late")
		got <- v
		errc <- err
	}()
	if err := s.Set(ctx, "late", []byte("hello")); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Get waiting for a key: %v", err)
	}
	if v := <-got; string(v) != "hello" {
		t.Fatalf("Get = %q, want %q", v, "hello")
	}

	// Values are copies: changing the caller's slice changes nothing stored.
	buf := []byte("abc")
	if err := s.Set(ctx, "copy", buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	if v, err := s.Get(ctx, "copy"); err != nil || string(v) != "abc" {
		t.Fatalf("Get(copy) = %q, %v; want \"abc\"", v, err)
	}
	if err := s.Set(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "empty"); err != nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %q, %v", v, err)
	}

	// A Get whose context ends returns the context's error.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if _, err := s.Get(short, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of a missing key = %v, want DeadlineExceeded", err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := s.Get(cancelled, "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled context = %v, want Canceled", err)
	}

	// Sizes are bounded.
	if err := s.Set(ctx, strings.Repeat("k", MaxKeyLen+1), nil); err == nil {
		t.Error("Set accepted a key over MaxKeyLen")
	}
	if err := s.Set(ctx, "big", make([]byte, MaxValueLen+1)); err == nil {
		t.Error("Set accepted a value over MaxValueLen")
	}
	if err := s.Set(ctx, "max", make([]byte, MaxValueLen)); err != nil {
		t.Errorf("Set of a MaxValueLen value: %v", err)
	}

	// Many ranks meet.
	const n = 5
	errs := make(chan error, n)
	for r := range n {
		go func() { errs <- Barrier(ctx, s, "b1", r, n) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Barrier: %v", err)
		}
	}
}

func TestMemStore(t *testing.T) {
	var s MemStore // the zero value works
	testStore(t, &s)
}

func TestMemStoreCreateAndAdd(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore()
	var wg sync.WaitGroup
	won := make([]string, 8)
	for i := range won {
		wg.Go(func() {
			v, err := Create(ctx, WithPrefix(s, "p/"), "k", []byte{byte('a' + i)})
			if err != nil {
				t.Error(err)
			}
			won[i] = string(v)
		})
	}
	wg.Wait()
	for i, w := range won {
		if w != won[0] {
			t.Fatalf("Create: caller %d saw %q, caller 0 saw %q: one value must win for all", i, w, won[0])
		}
	}
	if v, err := s.Get(ctx, "p/k"); err != nil || string(v) != won[0] {
		t.Fatalf("Get after Create = %q, %v; want %q", v, err, won[0])
	}
	for i := range 8 {
		wg.Go(func() {
			if _, err := Add(ctx, s, "n", int64(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n, err := s.Add(ctx, "n", 0); err != nil || n != 28 {
		t.Fatalf("Add total = %d, %v; want 28", n, err)
	}
	if _, err := s.Add(ctx, "p/k", 1); err == nil {
		t.Fatal("Add on a key holding a letter: no error")
	}
	if _, err := Create(ctx, struct{ Store }{s}, "x", nil); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Create on a store without it = %v, want ErrUnsupported", err)
	}
}
