package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// MemStore is a Store inside one process, for tests and for running several
// ranks as goroutines. The zero value is ready to use.
type MemStore struct {
	mu   sync.Mutex
	keys map[string]*memEntry
}

type memEntry struct {
	set   chan struct{} // closed once value is set
	value []byte
}

var (
	_ Store   = (*MemStore)(nil)
	_ Creator = (*MemStore)(nil)
	_ Adder   = (*MemStore)(nil)
)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{} }

func (s *MemStore) entry(key string) *memEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = make(map[string]*memEntry)
	}
	e := s.keys[key]
	if e == nil {
		e = &memEntry{set: make(chan struct{})}
		s.keys[key] = e
	}
	return e
}

// Set stores a copy of value under key. Setting a key again replaces its
// value for later Gets.
func (s *MemStore) Set(ctx context.Context, key string, value []byte) error {
	if err := CheckSizes(key, value); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e := s.entry(key)
	v := append([]byte{}, value...)
	s.mu.Lock()
	defer s.mu.Unlock()
	e.value = v
	select {
	case <-e.set:
	default:
		close(e.set)
	}
	return nil
}

// Get returns a copy of the value of key, waiting until it is set or ctx
// ends.
func (s *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	e := s.entry(key)
	select {
	case <-e.set:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte{}, e.value...), nil
}

// Create sets key to value unless it has a value, and returns its value.
func (s *MemStore) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	return s.update(ctx, key, value, func(old []byte, set bool) ([]byte, error) {
		if set {
			return old, nil
		}
		return append([]byte{}, value...), nil
	})
}

// Add adds delta to the decimal integer under key and returns the sum.
func (s *MemStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	b, err := s.update(ctx, key, nil, func(old []byte, set bool) ([]byte, error) {
		return addDecimal(key, old, set, delta)
	})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// update replaces key's value by what fn makes of it, atomically, and
// returns the new value.
func (s *MemStore) update(ctx context.Context, key string, value []byte, fn func(old []byte, set bool) ([]byte, error)) ([]byte, error) {
	if err := CheckSizes(key, value); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e := s.entry(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	set := isSet(e.set)
	v, err := fn(e.value, set)
	if err != nil {
		return nil, err
	}
	e.value = v
	if !set {
		close(e.set)
	}
	return append([]byte{}, v...), nil
}

func isSet(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// addDecimal is the value Add stores: old (a decimal integer, or nothing
// when !set) plus delta.
func addDecimal(key string, old []byte, set bool, delta int64) ([]byte, error) {
	var n int64
	if set {
		var err error
		if n, err = strconv.ParseInt(string(old), 10, 64); err != nil {
			return nil, fmt.Errorf("bootstrap: Add: key %q holds %q, not a decimal integer", key, old)
		}
	}
	return strconv.AppendInt(nil, n+delta, 10), nil
}
