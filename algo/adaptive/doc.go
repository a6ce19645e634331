// Package adaptive picks an all-reduce algorithm for every call from the
// message size, the world size and the transport, with a cost model whose
// terms are measured on the machine rather than guessed.
//
// The model of an algorithm is NCCL's: time = latency x steps(n) +
// bytes x factor(n) / bandwidth, where steps and factor describe the
// algorithm's shape (ring: 2(n-1) steps, 2(n-1)/n of the data per rank) and
// latency and bandwidth are fitted. `collbench tune` measures every candidate
// over a size sweep and fits the two terms per size band (FitSamples): a
// model that never falls as the size grows, reproduces the smoothed time of
// every measured size, keeps its bandwidth within what the sweep measured
// and its latency steady from band to band, however noisy the machine.
// It writes a Table as indented JSON that people can read and edit.
// Config.Choose returns the cheapest candidate. Without a Table it uses the
// built-in one (Builtin), measured on a 2-core machine over tcp and shm at
// 2, 3, 4 and 8 ranks, with the nearest measured world size's terms for
// others; other transports get built-in shape terms.
//
//	table, err := adaptive.Load("collkit-tune.json")
//	cfg := adaptive.Config{Table: table, Transport: "tcp"}
//	err = cfg.AllReduce(ctx, t, h, send, recv)
//
// Every rank must load the same table, so all choose the same algorithm; the
// choice is written into the message headers, so ranks that disagree get a
// mismatch error instead of a hang.
package adaptive
