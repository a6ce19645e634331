// Package reduce holds the element types and reduction operators of collkit and
// the kernels that apply them to byte buffers.
//
// Collectives move raw bytes; a DType says how to read them and an Op says how
// two buffers combine. Reduce and ReduceTo are the hot-path kernels used by
// every algorithm: dst = dst op src, and dst = a op b. Avg is computed as a sum
// followed by Finish, which divides the fully reduced buffer by the number of
// ranks once, so every algorithm produces the same bits.
//
//	reduce.Reduce(reduce.Float32, reduce.Sum, acc, incoming)
//	reduce.Finish(reduce.Float32, reduce.Avg, acc, worldSize)
//
// On amd64 CPUs with AVX2 (and F16C for float16) the kernels are assembly
// loops, chosen at startup, that run at memory bandwidth; elsewhere, or when
// built with the purego tag, they are portable Go. Both give the same bits,
// except which NaN results from NaN inputs, which is not specified.
package reduce
