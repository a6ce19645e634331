package clock

import (
	"testing"
	"time"
)

// fifth tells a call that costs nothing from one that spins 2 us, either
// way round, and a call from itself.
func TestFifth(t *testing.T) {
	cheap := func() {}
	dear := func() {
		for t := time.Now(); time.Since(t) < 2*time.Microsecond; {
		}
	}
	if !fifth(cheap, dear) {
		t.Error("a call that does nothing is not a fifth of one that spins 2 us")
	}
	if fifth(dear, cheap) {
		t.Error("a call that spins 2 us is a fifth of one that does nothing")
	}
	if fifth(dear, dear) {
		t.Error("a call is a fifth of itself")
	}
}
