package collkit

import "github.com/collkit/collkit/reduce"

// F16 and BF16 are the Go element types of Float16 and BFloat16 data, so
// that the typed collectives take []F16 and []BF16 as they take []float32:
// each holds the 16 bits of one number. Convert with ToF16 and ToBF16
// (round to nearest, ties to even) and the Float32 method (exact); String
// prints the number.
//
//	grads := []collkit.BF16{collkit.ToBF16(0.5), collkit.ToBF16(-2)}
//	err := collkit.AllReduce(ctx, comm, grads, grads, collkit.Sum)
//	fmt.Println(grads[0].Float32())
type (
	F16  = reduce.F16
	BF16 = reduce.BF16
)

// ToF16 rounds f to the nearest F16 (IEEE 754 binary16), ties to even:
// beyond ±65504 it is an infinity, below 2^-14 subnormal or zero, and a NaN
// stays a NaN.
func ToF16(f float32) F16 { return reduce.ToF16(f) }

// ToBF16 rounds f to the nearest BF16 (bfloat16), ties to even; a NaN stays
// a NaN.
func ToBF16(f float32) BF16 { return reduce.ToBF16(f) }
