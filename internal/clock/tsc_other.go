//go:build !amd64

package clock

func ticks() uint64 { return 0 }

// counterUsable is false: only amd64's counter is wired up.
func counterUsable() bool { return false }
