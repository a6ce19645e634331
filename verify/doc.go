// Package verify generates seeded collective inputs whose results are exactly
// predictable, and counts wrong elements, the way nccl-tests checks results.
//
// Inputs are small integers (and powers of two for Prod), so every partial
// result is exact in every dtype, float16 and bfloat16 included, whatever
// order an algorithm reduces in. Any difference from Expect is a real bug.
package verify
