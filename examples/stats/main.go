// Command stats runs a few collectives with tracing on, prints rank 0's
// communication statistics and writes a trace of every rank to one file
// (-o, default trace.json) that ui.perfetto.dev or chrome://tracing opens.
// Start one process per rank with a launcher, as examples/allreduce.
package main

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/collkit/collkit"
)

func main() {
	out := flag.String("o", "trace.json", "the trace file rank 0 writes")
	flag.Parse()
	ctx := context.Background()

	comm, err := collkit.FromEnv(ctx, collkit.Options{Trace: true})
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()

	// ... collectives ...
	x := make([]float32, 4096)
	for range 10 {
		if err := collkit.AllReduce(ctx, comm, x, x, collkit.Sum); err != nil {
			log.Fatal(err)
		}
	}
	if err := comm.Barrier(ctx); err != nil {
		log.Fatal(err)
	}

	if comm.Rank() == 0 {
		comm.Stats().WriteText(os.Stdout)
	}
	if err := comm.WriteTrace(ctx, *out); err != nil { // every rank calls it; rank 0 writes the file
		log.Fatal(err)
	}
}
