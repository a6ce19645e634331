package bootstrap

import (
	"context"
	"errors"
	"fmt"
)

// Store is the key-value store ranks use to exchange addresses and ids while a
// job starts. Keys are written once; Get waits for a key that is not there yet.
type Store interface {
	// Set stores value under key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value of key, waiting until some rank sets it or ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
}

// Creator is implemented by stores that can set a key only if it has no
// value yet, atomically: of several ranks that propose values for one key,
// the first wins and every rank learns which value won. Elastic
// communicators agree on their members through it (see collkit's
// Comm.Shrink).
type Creator interface {
	// Create sets key to value unless key already has a value, and returns
	// the key's value after the call: value when this call set it, the value
	// that was there otherwise.
	Create(ctx context.Context, key string, value []byte) ([]byte, error)
}

// MultiGetter is implemented by stores that wait for several keys more
// cheaply together than one by one: etcd reads and watches the keys' common
// prefix once instead of each key. GetMany returns the keys' values, in
// order, once all have one, or ctx's error. Exchange uses it (see GetMany).
type MultiGetter interface {
	GetMany(ctx context.Context, keys []string) ([][]byte, error)
}

// Watcher is implemented by stores that report several keys as they get
// values more cheaply than with a wait per key: etcd reads and watches the
// keys' common prefix once. Watch calls found with the index in keys and
// the value of each key that has one, once per key, the keys that have
// one already first, then the others as they are set, until found returns
// false or every key was reported (it then returns nil), or ctx ends (it
// returns ctx's error) or the store fails. found runs on one goroutine at
// a time. The elastic agreement waits through it for whichever members
// come (see Watch).
type Watcher interface {
	Watch(ctx context.Context, keys []string, found func(i int, value []byte) bool) error
}

// Adder is implemented by stores with atomic counters.
type Adder interface {
	// Add adds delta to the decimal integer stored under key (0 when key has
	// no value) and returns the sum, which it stores under key. Adding 0
	// reads the counter and may store nothing.
	Add(ctx context.Context, key string, delta int64) (int64, error)
}

// ErrUnsupported is wrapped by Create and Add for a store that lacks the
// operation.
var ErrUnsupported = errors.New("the store does not support this operation")

// Create calls s's Create, or returns an error wrapping ErrUnsupported when
// s has none.
func Create(ctx context.Context, s Store, key string, value []byte) ([]byte, error) {
	c, ok := s.(Creator)
	if !ok {
		return nil, fmt.Errorf("bootstrap: %w: %T has no Create (use the collkit store server, MemStore or an etcd store)", ErrUnsupported, s)
	}
	return c.Create(ctx, key, value)
}

// Add calls s's Add, or returns an error wrapping ErrUnsupported when s has
// none.
func Add(ctx context.Context, s Store, key string, delta int64) (int64, error) {
	a, ok := s.(Adder)
	if !ok {
		return 0, fmt.Errorf("bootstrap: %w: %T has no Add (use the collkit store server, MemStore or an etcd store)", ErrUnsupported, s)
	}
	return a.Add(ctx, key, delta)
}
