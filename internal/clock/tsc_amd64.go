package clock

import (
	"bytes"
	"os"
	"sync"
	"syscall"
	"time"
)

// ticks reads the time-stamp counter.
//
//go:noescape
func ticks() uint64

// counterUsable reports whether the kernel's own clock is the counter
// scaled, and the CPU says the counter's rate is constant (constant_tsc,
// nonstop_tsc): then the counter is as good a clock as the kernel's, read
// without it. The kernel's clock is the counter when its clocksource is
// tsc, and under KVM when it is kvm-clock and the vDSO serves it: kvm-clock
// is the counter scaled by the host's parameters, and the vDSO reads it
// only when the host says the counter runs in step on every vCPU
// (PVCLOCK_TSC_STABLE_BIT); otherwise every read is a system call, which
// vdsoServes tells by its cost.
func counterUsable() bool {
	if os.Getenv(Env) == "0" {
		return false
	}
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil {
		return false
	}
	switch string(bytes.TrimSpace(src)) {
	case "tsc":
	case "kvm-clock":
		if !vdsoServes() {
			return false
		}
	default:
		return false
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(info, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("flags")) {
			flags := bytes.Fields(line)
			return hasFlag(flags, "constant_tsc") && hasFlag(flags, "nonstop_tsc")
		}
	}
	return false
}

// vdsoServes reports whether reading the monotonic clock costs less than a
// fifth of the cheapest system call (getpid): then the vDSO answers it
// without entering the kernel. On the 2-vCPU KVM guests: 30 ns a read
// against 1.2 us a getpid. It measures once, so that every caller in the
// process (Since, and the tests that check it) gets the same answer.
var vdsoServes = sync.OnceValue(func() bool {
	return fifth(func() { _ = time.Since(base) }, func() { syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0) })
})

// fifth reports whether f costs less than a fifth of g: the least time of
// five batches of 64 calls counts for each, so that a preemption during a
// batch does not decide.
func fifth(f, g func()) bool {
	best := func(h func()) time.Duration {
		least := time.Duration(1 << 62)
		for range 5 {
			t := time.Now()
			for range 64 {
				h()
			}
			least = min(least, time.Since(t))
		}
		return least
	}
	return 5*best(f) < best(g)
}

func hasFlag(flags [][]byte, f string) bool {
	for _, g := range flags {
		if string(g) == f {
			return true
		}
	}
	return false
}
