//go:build !linux

package spin

import "runtime"

// Yield lets other goroutines run; other platforms have no portable
// sched_yield for it to call.
func Yield() { runtime.Gosched() }
