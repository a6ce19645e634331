package bootstrap

import (
	"context"
	"errors"
)

// WithPrefix returns a view of s whose keys all start with prefix, so that
// several communicators of one job can meet through the same store without
// reading each other's keys (Gloo's PrefixStore).
func WithPrefix(s Store, prefix string) Store { return prefixed{s, prefix} }

type prefixed struct {
	s      Store
	prefix string
}

func (p prefixed) Set(ctx context.Context, key string, value []byte) error {
	return p.s.Set(ctx, p.prefix+key, value)
}

func (p prefixed) Get(ctx context.Context, key string) ([]byte, error) {
	return p.s.Get(ctx, p.prefix+key)
}

func (p prefixed) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	return Create(ctx, p.s, p.prefix+key, value)
}

func (p prefixed) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return Add(ctx, p.s, p.prefix+key, delta)
}

func (p prefixed) Watch(ctx context.Context, keys []string, found func(int, []byte) bool) error {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	return Watch(ctx, p.s, full, found)
}

func (p prefixed) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	vals, err := GetMany(ctx, p.s, full)
	if me := (*MissingKeyError)(nil); errors.As(err, &me) {
		me.Key = keys[me.Index] // the caller's name for it
	}
	return vals, err
}
