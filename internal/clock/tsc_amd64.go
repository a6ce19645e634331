package clock

import (
	"bytes"
	"os"
)

// ticks reads the time-stamp counter.
//
//go:noescape
func ticks() uint64

// counterUsable reports whether the kernel counts time with the counter
// (its clocksource is tsc) and the CPU says the counter's rate is constant
// (constant_tsc, nonstop_tsc): then the counter is as good a clock as the
// kernel's, read without it.
func counterUsable() bool {
	if os.Getenv(Env) == "0" {
		return false
	}
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil || string(bytes.TrimSpace(src)) != "tsc" {
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

func hasFlag(flags [][]byte, f string) bool {
	for _, g := range flags {
		if string(g) == f {
			return true
		}
	}
	return false
}
