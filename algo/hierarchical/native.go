package hierarchical

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// nativeIntra returns Config.IntraTransport's own collectives when it runs
// them itself (transport.NativeCollectives, such as NCCL), found under any
// wrappers (an Unwrap method), or nil.
func (c *Config) nativeIntra() transport.NativeCollectives {
	t := c.IntraTransport
	for t != nil {
		if n, ok := t.(transport.NativeCollectives); ok {
			return n
		}
		w, ok := t.(interface{ Unwrap() transport.Transport })
		if !ok {
			return nil
		}
		t = w.Unwrap()
	}
	return nil
}

// native is the all-reduce of several nodes whose intra-node transport runs
// collectives itself: the intra-node phases are its library's
// reduce-scatter and all-gather (or reduce and broadcast), not rings over
// its Send and Recv. They run even with one rank per node, where they are
// copies on the library's side: a library such as NCCL then still holds
// the node's part of the work, as a GPU buffer's hybrid all-reduce needs.
//
// Nodes of L ranks each and a count divisible by L (the library's
// reduce-scatter and all-gather take equal shares) take the three phases of
// AllReduce; other layouts reduce to each node's leader, all-reduce among
// the leaders and broadcast from them.
func (x *run) native(ctx context.Context, n transport.NativeCollectives, buf []byte, es int) error {
	intraT, err := x.intraT()
	if err != nil {
		return err
	}
	size := intraT.Size()
	count := len(buf) / es
	if x.tp.even && count%size == 0 {
		if _, err := x.interT(levelInter); err != nil {
			return err
		}
		lo := x.tp.local * (count / size) * es
		shard := buf[lo : lo+count/size*es]
		if count > 0 { // an empty all-reduce is agreed on by the inter-node level
			if err := n.ReduceScatter(ctx, x.nativeHeader(transport.CollReduceScatter, count), buf, shard); err != nil {
				return x.intraErr("intra-node reduce-scatter", err)
			}
		}
		if err := x.across(ctx, levelInter, shard); err != nil {
			return fmt.Errorf("inter-node all-reduce of shard %d: %w", x.tp.local, err)
		}
		if count > 0 {
			if err := n.AllGather(ctx, x.nativeHeader(transport.CollAllGather, count), shard, buf); err != nil {
				return x.intraErr("intra-node all-gather", err)
			}
		}
		return nil
	}
	if count > 0 {
		if err := n.Reduce(ctx, x.nativeHeader(transport.CollReduce, count), buf, buf); err != nil {
			return x.intraErr("intra-node reduce to the leader", err)
		}
	}
	if x.tp.local == 0 {
		if err := x.across(ctx, levelLeaders, buf); err != nil {
			return fmt.Errorf("all-reduce among node leaders: %w", err)
		}
	}
	if count > 0 {
		if err := n.Broadcast(ctx, x.nativeHeader(transport.CollBroadcast, count), buf, buf); err != nil {
			return x.intraErr("intra-node broadcast from the leader", err)
		}
	}
	return nil
}

// nativeHeader describes an intra-node native collective of count
// elements (the whole buffer's), rooted at local rank 0 where it has a root.
func (x *run) nativeHeader(coll transport.Coll, count int) transport.Header {
	h := x.header(levelIntra, coll)
	h.Count, h.Root = uint64(count), 0
	return h
}
