// Package stream copies memory with streaming (non-temporal) stores, which
// write whole cache lines to memory without first taking them from the
// caches that hold them.
//
// A shared-memory transport fills a buffer that another core reads, and
// that core read the same buffer in the previous call. An ordinary store
// must first take each line back from the reader's cache: on this project's
// 2-core EPYC VM that made copying 256 KiB into the shared buffer take 40 us
// of a 58 us all-reduce, where streaming stores take a quarter of that. Go's
// copy switches to streaming stores by itself only from 1 MiB up.
//
// Copy is for a destination that another core reads next; for memory this
// core reads again soon, copy is faster, since the data stays in its cache.
// Even for the former it depends on the machine: on a 2-core Intel Xeon VM
// streaming made every shared-memory all-reduce from 256 KiB up slower
// (np 2, 256 KiB native: 65 us against 34 with copy; 16 MiB tree: 5.4 ms
// against 3.7), so the shm transport measures both when it connects.
package stream
