package algotest

import (
	"bytes"
	"math"
	"math/rand/v2"

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

// RoundingFloats are n ranks' inputs of count float32 elements of mixed
// signs and magnitudes (1e-2 to 1e3), seeded by n and count, whose sum
// rounds differently in every order: an all-reduce must still give every
// rank the same bits.
func RoundingFloats(n, count int) [][]float32 {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(count)))
	inputs := make([][]float32, n)
	for r := range inputs {
		inputs[r] = make([]float32, count)
		for i := range inputs[r] {
			inputs[r][i] = float32((rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(6)-2)))
		}
	}
	return inputs
}
