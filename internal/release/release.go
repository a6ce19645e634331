// Package release stores into atomic words with release order only: the
// store becomes visible after every earlier store of this goroutine, and
// nothing more is promised. That is what a single writer publishing data
// needs (a sequence lock, a flag that says a buffer is full), and on x86 it
// is a plain MOV, where sync/atomic's Store is an XCHG, a locked
// instruction that also waits for the store to leave the core: 20-30
// cycles each on the 2-core VMs, and a wait for the line when a peer holds
// it. A transport that stores a dozen such words a message spends a tenth
// of a 2-rank 8-byte all-reduce on them (np 2 over tcp: 3.75 against 3.65
// us a call without them).
//
// A store here is not ordered before a later load of another word (x86
// lets a load pass a buffered store): where one side stores a word and
// then loads one the other side stores (Dekker's pattern), use sync/atomic.
// Only non-pointer words: the garbage collector must see pointer stores.
//
// The race detector does not see these stores; readers still use
// sync/atomic's loads.
package release
