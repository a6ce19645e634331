// Package algotest is the correctness table every all-reduce algorithm must
// pass: world sizes 1-8, every dtype and op, element counts that are zero,
// one, prime or not divisible by the world size, in place and out of place,
// each element compared exactly with package verify's expectation.
//
// Under the race detector the table samples its large counts (LargeCount):
// every world size, count, dtype and placement still runs, with the ops
// rotating across them, since each byte costs several times more there.
//
// An algorithm's tests call it once per transport:
//
//	func TestAllReduce(t *testing.T) {
//		algotest.AllReduce(t, ring.AllReduce, memWorld)
//	}
package algotest
