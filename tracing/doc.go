// Package tracing records where a collective's time goes, as spans on one
// track per rank, and writes them as a Chrome trace (the JSON that
// chrome://tracing and ui.perfetto.dev open).
//
// A Recorder collects spans; Wrap puts a transport in front of it so every
// send and receive becomes a span carrying its peer, bytes and step; Align
// measures each rank's clock offset to rank 0 so spans of different hosts
// line up; Gather brings every rank's spans to rank 0, which writes the file:
//
//	rec := tracing.NewRecorder(t.Rank(), 0)
//	tt := tracing.Wrap(t, rec)
//	off, _ := tracing.Align(ctx, t, h, 8)
//	rec.SetOffset(off)
//	... run collectives over tt, adding a span for each with rec.Add ...
//	events, _ := tracing.Gather(ctx, t, h, rec)
//	if t.Rank() == 0 { tracing.WriteFile("trace.json", events) }
package tracing
