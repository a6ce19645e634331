// Package mem is an in-process transport.Transport: every rank of a job is a
// goroutine of one process and messages are copied between them through
// memory. It exists for tests of collective algorithms and of how they fail.
//
// A Network connects size ranks; Transports returns one Transport per rank,
// and each runs the algorithm under test on its own goroutine:
//
//	n := mem.NewNetwork(4, mem.Config{})
//	defer n.Close()
//	for rank, t := range n.Transports() {
//		go run(rank, t)
//	}
//
// The transport follows the whole transport contract: per-pair FIFO, header
// checks, full duplex, ctx cancellation and Close. Send never blocks: each
// directed link has an unbounded queue, so a test that needs flow control to
// make progress belongs on a real transport. Abort (transport.Aborter)
// closes a rank and leaves its reason for its peers, which get a
// *transport.AbortError quoting it once they have received what it sent.
//
// # Faults
//
// Config makes the network lose and delay messages, and Network.Cut and
// Network.Kill break links and ranks while operations are in flight;
// Network.Stop freezes a rank as SIGSTOP freezes a process, so that it
// answers no Ping (transport.Pinger) and its operations never return. Like
// tcp, a Transport reports its Waits and can Abort with a reason its peers
// quote. Each
// directed link draws from its own random source seeded by Config.Seed, so a
// seed picks the same faults on every run however the goroutines are
// scheduled. Delays are measured with the time package's clock, so inside a
// testing/synctest bubble they cost no wall time.
//
// A Network starts no goroutines and does no I/O; Close releases everything.
package mem
