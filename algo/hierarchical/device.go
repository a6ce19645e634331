package hierarchical

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// DeviceStage is GPU scratch memory that can be copied to and from the
// host: where AllReduceDevice keeps the part of the buffer that crosses
// nodes, and how it gets to the host transport between nodes
// (nccl.Memory is one).
type DeviceStage interface {
	// Buffer is the scratch memory.
	Buffer() transport.DeviceBuffer
	// CopyToHost copies the first len(p) bytes of Buffer into p.
	CopyToHost(p []byte) error
	// CopyFromHost copies p into the first len(p) bytes of Buffer.
	CopyFromHost(p []byte) error
}

// AllReduceDevice is AllReduce on GPU memory, NCCL inside each node and
// the main transport t (host memory: tcp, rdma) between nodes. The
// intra-node phases run on the GPU through Config.IntraTransport, which
// must take device memory (transport.DeviceCollectives); only the part
// that crosses nodes goes through the host, staged in stage, which must
// hold the whole buffer (its shard of it is enough when nodes are even and
// the count divides by their size, see AllReduce).
//
// With one node it is IntraTransport's own all-reduce. send and recv hold
// h.Count elements of h.DType on this rank's GPU; they may be the same.
func (c Config) AllReduceDevice(ctx context.Context, t transport.Transport, h transport.Header, send, recv transport.DeviceBuffer, stage DeviceStage) error {
	r := t.Rank()
	es := h.DType.Size()
	if es == 0 || !h.Op.Valid() || send.Len != recv.Len || send.Len%es != 0 {
		return fmt.Errorf("hierarchical: rank %d: dtype %v, op %v, send of %d bytes and recv of %d: want a valid dtype and op and equal buffers of whole elements",
			r, h.DType, h.Op, send.Len, recv.Len)
	}
	n, ok := c.IntraTransport.(transport.DeviceCollectives)
	if !ok {
		return fmt.Errorf("hierarchical: rank %d: device memory needs an intra-node transport that takes it (transport.DeviceCollectives, such as NCCL); Config.IntraTransport is %T",
			r, c.IntraTransport)
	}
	st, err := c.acquire(t)
	if err != nil {
		return err
	}
	defer st.release()
	tp := &st.tp
	size := len(tp.nodes[tp.node])
	if len(tp.nodes) == 1 {
		if c.IntraTransport.Size() != t.Size() || c.IntraTransport.Rank() != r {
			return fmt.Errorf("hierarchical: rank %d: one node, but the intra-node transport has rank %d of %d; it must span all %d ranks", r, c.IntraTransport.Rank(), c.IntraTransport.Size(), t.Size())
		}
		if err := n.AllReduceDevice(ctx, h, send, recv); err != nil {
			return fmt.Errorf("hierarchical: rank %d: intra-node all-reduce: %w", r, err)
		}
		return nil
	}
	x := &st.run
	*x = run{c: c, t: t, st: st, tp: tp, h: h, n: t.Size()}
	if x.h.Op == reduce.Avg {
		x.h.Op = reduce.Sum
		x.avg = true
	}
	err = x.device(ctx, n, send, recv, stage, es)
	*x = run{}
	if err != nil {
		return fmt.Errorf("hierarchical: rank %d (node %d, local rank %d of %d): %w", r, tp.node, tp.local, size, err)
	}
	return nil
}

// device is native's path on GPU memory: the same phases, with the part
// that crosses nodes copied from the GPU to the host and back.
func (x *run) device(ctx context.Context, n transport.DeviceCollectives, send, recv transport.DeviceBuffer, stage DeviceStage, es int) error {
	intraT, err := x.intraT()
	if err != nil {
		return err
	}
	size := intraT.Size()
	count := send.Len / es
	even := x.tp.even && count%size == 0
	need := send.Len
	if even {
		need = send.Len / size
	}
	if stage == nil || stage.Buffer().Len < need {
		return fmt.Errorf("the device stage holds %d bytes; this all-reduce needs %d", stageLen(stage), need)
	}
	sb := stage.Buffer().Slice(0, need)
	if cap(x.st.host) < need {
		x.st.host = make([]byte, need)
	}
	host := x.st.host[:need]
	// staged all-reduces the need bytes of sb with the other nodes at
	// level, through host memory.
	staged := func(level int) error {
		what := func() string {
			if level == levelLeaders {
				return "all-reduce among node leaders"
			}
			return fmt.Sprintf("inter-node all-reduce of shard %d", x.tp.local)
		}
		if err := stage.CopyToHost(host); err != nil {
			return fmt.Errorf("copying %d bytes from the GPU for the %s: %w", need, what(), err)
		}
		if err := x.across(ctx, level, host); err != nil {
			return fmt.Errorf("%s: %w", what(), err)
		}
		if err := stage.CopyFromHost(host); err != nil {
			return fmt.Errorf("copying %d bytes to the GPU after the %s: %w", need, what(), err)
		}
		return nil
	}
	if count == 0 { // agreed on by the inter-node level; nothing on the GPU
		switch {
		case even:
			return x.across(ctx, levelInter, nil)
		case x.tp.local == 0:
			return x.across(ctx, levelLeaders, nil)
		}
		return nil
	}
	if even {
		if err := n.ReduceScatterDevice(ctx, x.nativeHeader(transport.CollReduceScatter, count), send, sb); err != nil {
			return x.intraErr("intra-node reduce-scatter", err)
		}
		if err := staged(levelInter); err != nil {
			return err
		}
		if err := n.AllGatherDevice(ctx, x.nativeHeader(transport.CollAllGather, count), sb, recv); err != nil {
			return x.intraErr("intra-node all-gather", err)
		}
		return nil
	}
	if err := n.ReduceDevice(ctx, x.nativeHeader(transport.CollReduce, count), send, sb); err != nil {
		return x.intraErr("intra-node reduce to the leader", err)
	}
	if x.tp.local == 0 {
		if err := staged(levelLeaders); err != nil {
			return err
		}
	}
	if err := n.BroadcastDevice(ctx, x.nativeHeader(transport.CollBroadcast, count), sb, recv); err != nil {
		return x.intraErr("intra-node broadcast from the leader", err)
	}
	return nil
}

func stageLen(s DeviceStage) int {
	if s == nil {
		return 0
	}
	return s.Buffer().Len
}
