// Package storetest is the conformance suite for bootstrap.Store. Every
// store's tests call Run with a function that returns a fresh, empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) bootstrap.Store { return bootstrap.NewMemStore() })
//	}
//
// The suite checks that Get waits for a key and honours its context, that
// values are copies, that the size limits hold, that many ranks meet, that
// GetMany and Watch (the store's own, or bootstrap's Get per key) find keys
// set before and after they start and Watch reports each once; and,
// for stores that have them, that Create lets exactly one of many
// concurrent callers win and tells all of them its value, that Add totals
// are exact, that Add refuses a key that holds no integer, and that a key
// set by Create or Add wakes the Gets waiting for it. Every wait is bounded.
package storetest
