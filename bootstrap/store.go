package bootstrap

import "context"

// Store is the key-value store ranks use to exchange addresses and ids while a
// job starts. Keys are written once; Get waits for a key that is not there yet.
type Store interface {
	// Set stores value under key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value of key, waiting until some rank sets it or ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
}
