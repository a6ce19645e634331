package bench

// BufferBytes estimates the memory one rank of a sweep of collective coll
// over n ranks holds at its largest size: send, receive and, when checked,
// expected-result buffers (the checks of the collectives other than
// all-reduce also build each rank's inputs). Transports add their own
// staging on top, which this leaves out.
func BufferBytes(coll string, cfg Config, n int) int64 {
	if cfg.NumSizes() == 0 || n < 1 {
		return 0
	}
	sizes := cfg.Sizes()
	s := sizes[len(sizes)-1]
	block := s / int64(n)
	check := int64(0)
	if cfg.Check > 0 {
		check = 1
	}
	switch coll {
	case "allreduce":
		if cfg.Group > 1 {
			return 2*int64(cfg.Group)*s + check*s
		}
		return 2*s + check*s
	case "broadcast", "scatter":
		return s + block + check*s
	case "reduce", "sendrecv":
		return 2*s + check*s
	case "allgather", "gather":
		return block + s + check*2*s
	case "reducescatter":
		return s + block + check*s
	case "alltoall":
		return 2*s + check*2*s
	}
	return 2*s + check*s
}
