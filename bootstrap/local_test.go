package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// rank is a Connector that publishes its rank and reads every other's, so
// that it connects only when all ranks connect at once.
type rank struct {
	r, size int
	fail    bool
	peers   []string
	closed  atomic.Bool
}

func (k *rank) Connect(ctx context.Context, s Store) error {
	if k.fail {
		return fmt.Errorf("rank %d: refused", k.r)
	}
	if err := s.Set(ctx, fmt.Sprintf("rank/%d", k.r), []byte(fmt.Sprint(k.r))); err != nil {
		return err
	}
	for p := range k.size {
		v, err := s.Get(ctx, fmt.Sprintf("rank/%d", p))
		if err != nil {
			return err
		}
		k.peers = append(k.peers, string(v))
	}
	return nil
}

func (k *rank) Close() error { k.closed.Store(true); return nil }

func TestConnectLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ks, err := ConnectLocal(ctx, 4, func(r int) (*rank, error) { return &rank{r: r, size: 4}, nil })
	if err != nil {
		t.Fatal(err)
	}
	for r, k := range ks {
		if k.r != r || fmt.Sprint(k.peers) != "[0 1 2 3]" || k.closed.Load() {
			t.Errorf("rank %d: got rank %d, peers %v, closed %v; want rank %d, peers [0 1 2 3], open", r, k.r, k.peers, k.closed.Load(), r)
		}
	}
}

func TestConnectLocalFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var made []*rank
	_, err := ConnectLocal(ctx, 3, func(r int) (*rank, error) {
		k := &rank{r: r, size: 1, fail: r == 1}
		made = append(made, k)
		return k, nil
	})
	if err == nil || err.Error() != "rank 1: refused" {
		t.Fatalf("got error %v, want rank 1's refusal", err)
	}
	for _, k := range made {
		if !k.closed.Load() {
			t.Errorf("rank %d left open after rank 1 failed", k.r)
		}
	}

	bad := errors.New("no such device")
	if _, err := ConnectLocal(ctx, 2, func(r int) (*rank, error) { return nil, bad }); !errors.Is(err, bad) {
		t.Fatalf("got error %v, want %v", err, bad)
	}
}
