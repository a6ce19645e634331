// Package metrics keeps a communicator's real communication statistics:
// per collective x algorithm x transport, the number of operations, errors,
// bytes sent and received (counted on the wire by a transport wrapper, not
// derived from formulas) and the time of each operation in a bounded
// histogram from which p50 and p99 are read.
//
// Recording costs two atomic adds per message and a few nanoseconds per
// operation, so communicators keep it on by default:
//
//	reg := metrics.NewRegistry()
//	ct := metrics.Count(t)              // wrap the transport
//	before := ct.Totals()
//	start := time.Now()
//	err := ring.AllReduce(ctx, ct, h, send, recv)
//	reg.Record(metrics.Key{Collective: "allreduce", Algorithm: "ring", Transport: "tcp"},
//		time.Since(start), ct.Totals().Sub(before), err)
//	reg.Snapshot().WriteText(os.Stdout)
package metrics
