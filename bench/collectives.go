package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/verify"
)

// Collectives lists the collectives RunCollective measures, as collbench's
// --coll names them.
func Collectives() []string {
	return []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather", "scatter", "barrier", "sendrecv"}
}

// BusFactor is busbw / algbw for collective coll on n ranks, as nccl-tests
// defines it, where algbw is S / time and S is the whole array: the
// all-gather output, the reduce-scatter input, one rank's all-to-all
// buffer, the gathered or scattered array, or the one buffer of the others.
func BusFactor(coll string, n int) float64 {
	switch coll {
	case "allreduce":
		return AllReduceBusFactor(n)
	case "allgather", "reducescatter", "alltoall", "gather", "scatter":
		return float64(n-1) / float64(n)
	}
	return 1 // broadcast, reduce, sendrecv
}

// call is one rank's buffers and parameters for one size of a sweep.
type call struct {
	c          *collkit.Comm
	cfg        Config
	n, r, root int
	count      int // elements of the whole array S
	block      int // bytes of one rank's block (count/n elements)
	send, recv []byte
	dev        *deviceBuffers // with Config.Device: send and recv on the GPU
}

// collective is how the benchmark runs and checks one collective.
type collective struct {
	blocks  bool // S is n blocks: the count is rounded down to a multiple of n
	noData  bool // moves no data (barrier): one row of 0 bytes, whatever the sizes
	onRoot  bool // only the root's input is read (its buffer is also the output)
	reduces bool // uses the op
	rooted  bool
	// sizes returns the send and recv buffer lengths for S bytes.
	sizes func(x *call, s int) (send, recv int)
	// args picks the buffers of a call, in place or out of place. The
	// collectives without an in-place form run out of place in both columns.
	args func(x *call, inPlace bool) (send, recv []byte)
	run  func(ctx context.Context, x *call, send, recv []byte) error
	// wrong counts the elements of this rank's output (recv) that differ
	// from what the inputs of seed give; zero when this rank has none. It
	// makes the expected values a few KiB at a time (verify.WrongFill,
	// WrongExpect), so that a rank holds no third buffer of the size.
	wrong func(x *call, seed uint64, recv []byte) int
	// check, when set, replaces checkColl's element-by-element check (for
	// a collective without data): the wrong outcomes summed over ranks, and
	// whether it could check at all.
	check func(ctx context.Context, x *call, cfg Config) (wrong int64, checked bool, err error)
}

func sameSizes(_ *call, s int) (int, int) { return s, s }

func outOfPlace(x *call, _ bool) ([]byte, []byte) { return x.send, x.recv }

// inPlaceInRecv runs in place in recv: the input is written there first.
func inPlaceInRecv(x *call, inPlace bool) ([]byte, []byte) {
	if inPlace {
		return x.recv, x.recv
	}
	return x.send, x.recv
}

// wrongFill counts the elements of got that differ from rank k's input
// from element first on.
func wrongFill(x *call, seed uint64, got []byte, k, first int) int {
	return verify.WrongFill(x.cfg.DType, x.cfg.Op, got, seed, k, first)
}

// wrongGathered counts the wrong elements of every rank's block of inputs
// in got, in rank order: what an all-gather leaves on every rank and a
// gather on the root.
func wrongGathered(x *call, seed uint64, got []byte) int {
	bs, wrong := x.count/x.n*x.cfg.DType.Size(), 0
	for k := range x.n {
		wrong += wrongFill(x, seed, got[k*bs:(k+1)*bs], k, 0)
	}
	return wrong
}

var collectives = map[string]collective{
	"broadcast": {
		rooted: true, onRoot: true,
		sizes: func(_ *call, s int) (int, int) { return 0, s },
		args:  func(x *call, _ bool) ([]byte, []byte) { return x.recv, x.recv },
		run: func(ctx context.Context, x *call, _, buf []byte) error {
			return x.c.Broadcast(ctx, x.cfg.DType, buf, x.root)
		},
		wrong: func(x *call, seed uint64, buf []byte) int {
			return wrongFill(x, seed, buf, x.root, 0)
		},
	},
	"reduce": {
		reduces: true, rooted: true,
		sizes: sameSizes,
		args:  inPlaceInRecv,
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			return x.c.Reduce(ctx, x.cfg.DType, x.cfg.Op, send, recv, x.root)
		},
		wrong: func(x *call, seed uint64, recv []byte) int {
			if x.r != x.root {
				return 0
			}
			return verify.WrongExpect(x.cfg.DType, x.cfg.Op, recv, seed, x.n, 0)
		},
	},
	"allgather": {
		blocks: true,
		sizes:  func(x *call, s int) (int, int) { return s / x.n, s },
		args: func(x *call, inPlace bool) ([]byte, []byte) {
			if inPlace {
				return x.recv[x.r*x.block : (x.r+1)*x.block], x.recv
			}
			return x.send, x.recv
		},
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			return x.c.AllGather(ctx, x.cfg.DType, send, recv)
		},
		wrong: wrongGathered,
	},
	"reducescatter": {
		blocks: true, reduces: true,
		sizes: func(x *call, s int) (int, int) { return s, s / x.n },
		args: func(x *call, inPlace bool) ([]byte, []byte) {
			if inPlace {
				return x.send, x.send[x.r*x.block : (x.r+1)*x.block]
			}
			return x.send, x.recv
		},
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			return x.c.ReduceScatter(ctx, x.cfg.DType, x.cfg.Op, send, recv)
		},
		wrong: func(x *call, seed uint64, recv []byte) int {
			return verify.WrongExpect(x.cfg.DType, x.cfg.Op, recv, seed, x.n, x.r*x.block/x.cfg.DType.Size())
		},
	},
	"alltoall": {
		blocks: true,
		sizes:  sameSizes,
		args:   inPlaceInRecv,
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			return x.c.AllToAll(ctx, x.cfg.DType, send, recv)
		},
		wrong: func(x *call, seed uint64, recv []byte) int {
			wrong := 0
			for k := range x.n {
				wrong += wrongFill(x, seed, recv[k*x.block:(k+1)*x.block], k, x.r*x.block/x.cfg.DType.Size())
			}
			return wrong
		},
	},
	"gather": {
		blocks: true, rooted: true,
		sizes: func(x *call, s int) (int, int) { return s / x.n, s },
		args:  outOfPlace,
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			return x.c.Gather(ctx, x.cfg.DType, send, recv, x.root)
		},
		wrong: func(x *call, seed uint64, recv []byte) int {
			if x.r != x.root {
				return 0
			}
			return wrongGathered(x, seed, recv)
		},
	},
	"scatter": {
		blocks: true, rooted: true,
		sizes: func(x *call, s int) (int, int) { return s, s / x.n },
		args:  outOfPlace,
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			return x.c.Scatter(ctx, x.cfg.DType, send, recv, x.root)
		},
		wrong: func(x *call, seed uint64, recv []byte) int {
			return wrongFill(x, seed, recv, x.root, x.r*x.block/x.cfg.DType.Size())
		},
	},
	"barrier": {
		noData: true,
		sizes:  func(*call, int) (int, int) { return 0, 0 },
		args:   outOfPlace,
		run: func(ctx context.Context, x *call, _, _ []byte) error {
			return x.c.Barrier(ctx)
		},
		check: checkBarrier,
	},
	"sendrecv": {
		sizes: sameSizes,
		args:  outOfPlace,
		// Every rank sends to its right and receives from its left at once,
		// as nccl-tests' sendrecv does.
		run: func(ctx context.Context, x *call, send, recv []byte) error {
			if x.n == 1 {
				copy(recv, send)
				return nil
			}
			g := x.c.Group()
			g.Send(x.cfg.DType, send, (x.r+1)%x.n)
			g.Recv(x.cfg.DType, recv, (x.r-1+x.n)%x.n)
			return g.Run(ctx)
		},
		wrong: func(x *call, seed uint64, recv []byte) int {
			return wrongFill(x, seed, recv, (x.r-1+x.n)%x.n, 0)
		},
	},
}

// CollectiveAlgorithm names what a collective runs at a size, for the
// report's algorithm column.
func CollectiveAlgorithm(c *collkit.Comm, coll string, bytes int64) string {
	switch coll {
	case "allreduce":
		return c.Choose(bytes)
	case "broadcast":
		return c.BroadcastAlgorithm(bytes)
	case "reduce":
		if bytes <= collkit.DefaultTreeBytes {
			return "dissemination"
		}
		return "ring"
	case "reducescatter":
		if bytes <= collkit.DefaultTreeBytes {
			return "dissemination"
		}
		return "ring"
	case "scatter", "gather":
		return c.ScatterAlgorithm(bytes)
	case "barrier":
		return "dissemination"
	case "allgather", "alltoall":
		if bytes <= collkit.DefaultTreeBytes {
			return "dissemination"
		}
		return "pairwise"
	}
	return "direct"
}

// RunCollective sweeps collective coll (one of Collectives) over cfg's
// sizes, like Run does for all-reduce, which it calls for "allreduce". Each
// size is S, the whole array of BusFactor; collectives made of one block per
// rank round it down to a multiple of the ranks. root is used by broadcast,
// reduce, gather and scatter. Every checked iteration compares every output
// element with its exact expectation. The barrier moves no data: it is
// measured once, as a row of 0 bytes, and checked by checkBarrier.
//
// With cfg.Device the buffers are on the GPU (see Config.Device) for the
// collectives NCCL runs: all but alltoall, gather and scatter.
func RunCollective(ctx context.Context, c *collkit.Comm, coll string, cfg Config, root int, each func(Row)) ([]Row, error) {
	if coll == "allreduce" && !cfg.Device {
		return Run(ctx, c, cfg, each)
	}
	spec, ok := collectives[coll]
	if coll == "allreduce" {
		spec, ok = allReduceSpec, true
	}
	if !ok {
		return nil, fmt.Errorf("unknown collective %q (use one of %v)", coll, Collectives())
	}
	var dev *deviceBuffers
	if cfg.Device && cfg.Iters == 0 && cfg.MinTime <= 0 {
		cfg.Iters = 20
	}
	if root < 0 || root >= c.Size() {
		return nil, fmt.Errorf("root %d is not a rank of %d (0 to %d)", root, c.Size(), c.Size()-1)
	}
	n, es := c.Size(), cfg.DType.Size()
	newCall := func(size int64) *call {
		count := int(size) / es
		if spec.blocks {
			count = max(count/n, 1) * n
		}
		if spec.noData {
			count = 0
		}
		return &call{c: c, cfg: cfg, n: n, r: c.Rank(), root: root, count: count, block: count / n * es}
	}
	// One send and one receive buffer for the whole sweep, of the largest
	// size's lengths, are all a rank holds of the sizes.
	var send, recv []byte
	sizes := cfg.Sizes()
	if spec.noData {
		sizes = sizes[:min(len(sizes), 1)]
	}
	if len(sizes) > 0 {
		x := newCall(sizes[len(sizes)-1])
		sb, rb := spec.sizes(x, x.count*es)
		send, recv = make([]byte, sb), make([]byte, rb)
		if cfg.Device {
			var err error
			if dev, err = newDeviceBuffers(c, coll, sb, rb); err != nil {
				return nil, err
			}
			defer dev.free()
		}
	}
	var rows []Row
	for _, size := range sizes {
		x := newCall(size)
		count := x.count
		sb, rb := spec.sizes(x, count*es)
		x.send, x.recv = send[:sb], recv[:rb]
		verify.Fill(cfg.DType, cfg.Op, x.send, cfg.Seed, x.r)
		verify.Fill(cfg.DType, cfg.Op, x.recv, cfg.Seed, x.r)
		x.dev = dev
		if err := dev.upload(x); err != nil {
			return rows, err
		}
		row := Row{Bytes: int64(count * es), Count: int64(count), DType: cfg.DType.String(), Op: "none", Root: -1,
			Algorithm: CollectiveAlgorithm(c, coll, int64(count*es))}
		if spec.reduces {
			row.Op = cfg.Op.String()
		}
		if spec.rooted {
			row.Root = root
		}
		for i, m := range []*Measurement{&row.OutOfPlace, &row.InPlace} {
			inPlace := i == 1
			var err error
			if *m, err = measure(ctx, c, cfg, x.runner(ctx, spec, inPlace)); err != nil {
				return rows, err
			}
			if m.Wrong, m.Checked, err = checkColl(ctx, x, cfg, spec, inPlace); err != nil {
				return rows, err
			}
			m.setBandwidth(row.Bytes, BusFactor(coll, n))
		}
		rows = append(rows, row)
		if each != nil {
			each(row)
		}
	}
	return rows, nil
}

// checkColl runs cfg.Check verified calls and returns the wrong elements
// summed over ranks, and whether anything was checked.
func checkColl(ctx context.Context, x *call, cfg Config, spec collective, inPlace bool) (int64, bool, error) {
	if spec.check != nil {
		return spec.check(ctx, x, cfg)
	}
	var wrong [1]int64
	for it := range cfg.Check {
		seed := cfg.Seed + uint64(it) + 1
		send, recv := spec.args(x, inPlace)
		poison(recv)
		if !spec.onRoot || x.r == x.root {
			verify.Fill(cfg.DType, cfg.Op, send, seed, x.r)
		}
		if err := x.dev.upload(x); err != nil {
			return 0, false, err
		}
		if err := x.runner(ctx, spec, inPlace)(); err != nil {
			return 0, false, err
		}
		if err := x.dev.download(x); err != nil {
			return 0, false, err
		}
		wrong[0] += int64(spec.wrong(x, seed, recv))
	}
	if err := collkit.AllReduce(ctx, x.c, wrong[:], wrong[:], collkit.Sum); err != nil {
		return 0, false, err
	}
	return wrong[0], cfg.Check > 0, nil
}

// Reduces reports whether collective coll applies the reduction op.
func Reduces(coll string) bool { return coll == "allreduce" || collectives[coll].reduces }

// Rooted reports whether collective coll has a root.
func Rooted(coll string) bool { return collectives[coll].rooted }

// IsCollective reports whether name is one of Collectives.
func IsCollective(name string) bool { return slices.Contains(Collectives(), name) }

// barrierLate is how much later than the others one rank enters each
// checked barrier: long enough that a barrier letting the others out at
// once has them out before it, even on a loaded machine.
const barrierLate = 5 * time.Millisecond

// checkBarrier runs cfg.Check barriers in which one rank (the iteration's
// number, modulo the ranks) enters barrierLate after the others, and counts
// the ranks that left one before that rank entered it: what a barrier
// promises. It compares the host's wall clock as read by each rank, so it
// checks only when every rank runs on the same host (by host name);
// otherwise it reports nothing checked.
func checkBarrier(ctx context.Context, x *call, cfg Config) (int64, bool, error) {
	if cfg.Check == 0 {
		return 0, false, nil
	}
	host, _ := os.Hostname()
	h := int64(crc32.ChecksumIEEE([]byte(host)))
	hosts := []int64{h, -h} // the largest hash and minus the smallest
	if err := collkit.AllReduce(ctx, x.c, hosts, hosts, collkit.Max); err != nil {
		return 0, false, err
	}
	if hosts[0] != -hosts[1] {
		return 0, false, nil
	}
	var wrong [1]int64
	for it := range cfg.Check {
		if x.r == it%x.n {
			time.Sleep(barrierLate)
		}
		entered := []int64{time.Now().UnixNano()}
		if err := x.c.Barrier(ctx); err != nil {
			return 0, false, err
		}
		left := time.Now().UnixNano()
		if err := collkit.AllReduce(ctx, x.c, entered, entered, collkit.Max); err != nil {
			return 0, false, err
		}
		if left < entered[0] {
			wrong[0]++
		}
	}
	if err := collkit.AllReduce(ctx, x.c, wrong[:], wrong[:], collkit.Sum); err != nil {
		return 0, false, err
	}
	return wrong[0], true, nil
}
