package bench

import (
	"context"
	"fmt"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/verify"
)

// MaxGroupBytes bounds Config.Group x the largest size: the group's buffers
// all exist at once.
const MaxGroupBytes = 1 << 30

// grouped is Config.Group all-reduces of one size: n send and recv buffers
// and how to issue them.
type grouped struct {
	c          *collkit.Comm
	cfg        Config
	send, recv [][]byte
	// With Config.Device: the GPU copies of all send and recv buffers, and
	// of each of them; the host ones are their mirrors for checking.
	sendAll, recvAll []byte
	dev              *deviceBuffers
	dsend, drecv     []collkit.DeviceBuffer
}

func newGrouped(c *collkit.Comm, cfg Config, size int64) (*grouped, error) {
	g := &grouped{c: c, cfg: cfg}
	g.sendAll, g.recvAll = make([]byte, size*int64(cfg.Group)), make([]byte, size*int64(cfg.Group))
	for i := range cfg.Group {
		lo, hi := int64(i)*size, int64(i+1)*size
		g.send, g.recv = append(g.send, g.sendAll[lo:hi:hi]), append(g.recv, g.recvAll[lo:hi:hi])
		verify.Fill(cfg.DType, cfg.Op, g.send[i], cfg.Seed, c.Rank())
	}
	if !cfg.Device {
		return g, nil
	}
	var err error
	if g.dev, err = newDeviceBuffers(c, "allreduce", len(g.sendAll), len(g.recvAll)); err != nil {
		return nil, err
	}
	for i := range cfg.Group {
		lo, hi := i*int(size), (i+1)*int(size)
		g.dsend = append(g.dsend, g.dev.send.Buffer().Slice(lo, hi))
		g.drecv = append(g.drecv, g.dev.recv.Buffer().Slice(lo, hi))
	}
	return g, g.upload()
}

// upload copies the host buffers to the GPU, with Config.Device.
func (g *grouped) upload() error {
	if g.dev == nil {
		return nil
	}
	return g.dev.upload(&call{send: g.sendAll, recv: g.recvAll})
}

// runDevice issues the all-reduces on GPU memory: as one NCCL group, or
// one after another with NoFusion.
func (g *grouped) runDevice(ctx context.Context, inPlace bool) error {
	src := g.dsend
	if inPlace {
		src = g.drecv
	}
	if g.cfg.NoFusion {
		for i := range src {
			if err := g.c.AllReduceDevice(ctx, g.cfg.DType, g.cfg.Op, src[i], g.drecv[i]); err != nil {
				return err
			}
		}
		return nil
	}
	grp := g.c.DeviceGroup()
	for i := range src {
		grp.AllReduce(g.cfg.DType, g.cfg.Op, src[i], g.drecv[i])
	}
	return grp.Run(ctx)
}

// run issues the all-reduces: as one fused group (Config.Fuse), or one
// after another.
func (g *grouped) run(ctx context.Context, inPlace bool) error {
	if g.dev != nil {
		return g.runDevice(ctx, inPlace)
	}
	src := g.send
	if inPlace {
		src = g.recv
	}
	if !g.cfg.NoFusion {
		grp := g.c.Group()
		for i := range src {
			grp.AllReduce(g.cfg.DType, g.cfg.Op, src[i], g.recv[i])
		}
		return grp.Run(ctx)
	}
	for i := range src {
		if err := g.c.AllReduce(ctx, g.cfg.DType, g.cfg.Op, src[i], g.recv[i]); err != nil {
			return err
		}
	}
	return nil
}

// check runs the group cfg.Check times, out of place and in place, and
// counts the wrong elements of every all-reduce, summed over ranks.
func (g *grouped) check(ctx context.Context) (outWrong, inWrong int64, err error) {
	var wrong [2]int64
	for it := range g.cfg.Check {
		seed := g.cfg.Seed + uint64(it) + 1
		for k, inPlace := range []bool{false, true} {
			for i := range g.send {
				if inPlace {
					verify.Fill(g.cfg.DType, g.cfg.Op, g.recv[i], seed, g.c.Rank())
				} else {
					verify.Fill(g.cfg.DType, g.cfg.Op, g.send[i], seed, g.c.Rank())
					poison(g.recv[i])
				}
			}
			if err := g.upload(); err != nil {
				return 0, 0, err
			}
			if err := g.run(ctx, inPlace); err != nil {
				return 0, 0, err
			}
			if g.dev != nil {
				if err := g.dev.download(&call{recv: g.recvAll}); err != nil {
					return 0, 0, err
				}
			}
			for i := range g.recv {
				wrong[k] += int64(verify.WrongExpect(g.cfg.DType, g.cfg.Op, g.recv[i], seed, g.c.Size(), 0))
			}
		}
	}
	if err := collkit.AllReduce(ctx, g.c, wrong[:], wrong[:], collkit.Sum); err != nil {
		return 0, 0, err
	}
	return wrong[0], wrong[1], nil
}

// runGroup is Run with Config.Group all-reduces per iteration: times are
// for the whole group, or per all-reduce with Config.PerOperation (Bytes
// stays one all-reduce's size).
func runGroup(ctx context.Context, c *collkit.Comm, cfg Config, each func(Row)) ([]Row, error) {
	sizes := cfg.Sizes()
	if len(sizes) > 0 && sizes[len(sizes)-1]*int64(cfg.Group) > MaxGroupBytes {
		return nil, fmt.Errorf("a group of %d all-reduces of %d bytes needs more than %d bytes of buffers: lower the group or the size",
			cfg.Group, sizes[len(sizes)-1], MaxGroupBytes)
	}
	var rows []Row
	for _, size := range sizes {
		row, err := groupRow(ctx, c, cfg, size)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
		if each != nil {
			each(row)
		}
	}
	return rows, nil
}

// groupRow measures and checks the group at one size; its buffers, on the
// GPU too with Config.Device, live only while it runs.
func groupRow(ctx context.Context, c *collkit.Comm, cfg Config, size int64) (Row, error) {
	g, err := newGrouped(c, cfg, size)
	if err != nil {
		return Row{}, err
	}
	if g.dev != nil {
		defer g.dev.free()
	}
	algo := c.Choose(size)
	switch {
	case cfg.Device && !cfg.NoFusion:
		algo = fmt.Sprintf("%d in one NCCL group: %s", cfg.Group, algo)
	case !cfg.NoFusion:
		algo = fmt.Sprintf("%d fused: %s", cfg.Group, c.Choose(size*int64(cfg.Group)))
	}
	row := Row{Bytes: size, Count: size / int64(cfg.DType.Size()), DType: cfg.DType.String(), Op: cfg.Op.String(), Root: -1, Algorithm: algo}
	if row.OutOfPlace, err = measure(ctx, c, cfg, func() error { return g.run(ctx, false) }); err != nil {
		return row, err
	}
	if row.InPlace, err = measure(ctx, c, cfg, func() error { return g.run(ctx, true) }); err != nil {
		return row, err
	}
	if cfg.Check > 0 {
		if row.OutOfPlace.Wrong, row.InPlace.Wrong, err = g.check(ctx); err != nil {
			return row, err
		}
		row.OutOfPlace.Checked, row.InPlace.Checked = true, true
	}
	for _, m := range []*Measurement{&row.OutOfPlace, &row.InPlace} {
		moved := size * int64(cfg.Group)
		if cfg.PerOperation {
			m.scale(float64(cfg.Group))
			moved = size
		}
		m.setBandwidth(moved, AllReduceBusFactor(c.Size()))
	}
	return row, nil
}
