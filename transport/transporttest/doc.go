// Package transporttest is the conformance suite for transport.Transport.
// Every implementation's tests call Run with a World that builds connected
// transports; passing it is what makes a transport usable by every algorithm.
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
//			n := mem.NewNetwork(size, mem.Config{})
//			t.Cleanup(func() { n.Close() })
//			return n.Transports()
//		})
//	}
//
// The suite checks the contract in package transport's documentation: ranks
// and sizes, per-pair ordering and payload integrity over sizes from 0 bytes
// to megabytes, full duplex, concurrent traffic with many peers, header
// mismatches, invalid peers, contexts, Close and a peer's Close. Every wait is
// bounded, so a transport that hangs fails the suite instead of stalling it.
// Under go test -short the large transfers shrink.
//
// The suite closes transports itself where a test needs it, so a World's
// cleanup must tolerate transports that are already closed.
package transporttest
