package algotest

import (
	"bytes"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/verify"
)

// Input is rank's seeded input of count elements of dt (verify.Fill), so
// that any reduction of the inputs of all ranks is exactly verify.Expect.
func Input(dt reduce.DType, op reduce.Op, count int, seed uint64, rank int) []byte {
	b := make([]byte, count*dt.Size())
	verify.Fill(dt, op, b, seed, rank)
	return b
}

// Poisoned is an output buffer of n bytes of 0xA5, a pattern no correct
// result has everywhere, so a collective that writes nothing is caught.
func Poisoned(n int) []byte {
	// bytes.Repeat fills by copying, which the race detector checks once per
	// copy rather than once per byte.
	return bytes.Repeat([]byte{0xA5}, n)
}
