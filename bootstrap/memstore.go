package bootstrap

import (
	"context"
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

var _ Store = (*MemStore)(nil)

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
	if err := checkSizes(key, value); err != nil {
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
