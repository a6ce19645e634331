package transport

import (
	"context"
	"fmt"
)

// NativeAllReducer is implemented by transports that run an all-reduce
// themselves instead of letting an algorithm run it over Send and Recv:
// shared memory, where each rank reduces its slice straight out of the
// other ranks' buffers, and NCCL. Callers find it by type assertion and
// fall back to an algorithm:
//
//	if n, ok := t.(transport.NativeAllReducer); ok {
//		err = n.AllReduce(ctx, h, send, recv)
//	}
//
// It heads the native collectives, NativeAllReducer and NativeCollectives,
// whose methods all take the operation's Header, as the algorithms do:
// DType, Op (for the collectives that reduce), Root (for Broadcast and
// Reduce) and Count, the elements of the whole operation, describe it; Len
// is ignored. The method, not h.Coll, says which collective runs; a
// transport may compare the rest of the header across ranks and return a
// *MismatchError where ranks disagree. Every rank calls the same
// collectives in the same order. Buffers are host memory (DeviceCollectives
// takes GPU memory). CheckNative
// states the rules on buffer lengths, and implementations call it before
// they start.
type NativeAllReducer interface {
	// AllReduce reduces send over all ranks into recv with h.DType and
	// h.Op. send and recv hold h.Count elements and may be the same slice.
	AllReduce(ctx context.Context, h Header, send, recv []byte) error
}

// NativeCollectives is implemented by transports whose library runs every
// common collective itself (NCCL). A communicator hands its collectives
// over instead of running an algorithm.
type NativeCollectives interface {
	NativeAllReducer
	// Broadcast copies root's send into recv on every rank; send is read
	// on h.Root only. send and recv hold h.Count elements.
	Broadcast(ctx context.Context, h Header, send, recv []byte) error
	// Reduce reduces send over all ranks with h.Op into recv on h.Root;
	// recv is left alone on the other ranks. send and recv hold h.Count
	// elements.
	Reduce(ctx context.Context, h Header, send, recv []byte) error
	// AllGather concatenates every rank's send, in rank order, into recv:
	// recv holds h.Count elements, send h.Count/Size().
	AllGather(ctx context.Context, h Header, send, recv []byte) error
	// ReduceScatter reduces send over all ranks with h.Op and leaves block
	// Rank() of the result in recv: send holds h.Count elements, recv
	// h.Count/Size().
	ReduceScatter(ctx context.Context, h Header, send, recv []byte) error
}

// CheckNative checks the arguments of native collective coll on a rank of
// size ranks: h.DType is valid, and so is h.Op for the collectives that
// reduce, h.Root is a rank for Broadcast and Reduce, and send and recv hold
// the elements h.Count asks for (see NativeAllReducer and
// NativeCollectives).
// It returns the element size. The error says what is wrong and what was
// expected; the caller wraps it with its transport, rank and collective.
func CheckNative(coll Coll, h Header, size int, send, recv []byte) (es int, err error) {
	return CheckNativeLen(coll, h, size, len(send), len(recv))
}

// CheckNativeLen is CheckNative for buffers of send and recv bytes, such as
// DeviceBuffers.
func CheckNativeLen(coll Coll, h Header, size int, send, recv int) (es int, err error) {
	es = h.DType.Size()
	if es == 0 {
		return 0, fmt.Errorf("invalid dtype %v", h.DType)
	}
	switch coll {
	case CollAllReduce, CollReduce, CollReduceScatter:
		if !h.Op.Valid() {
			return 0, fmt.Errorf("invalid reduction op %v", h.Op)
		}
	case CollBroadcast, CollAllGather:
	default:
		return 0, fmt.Errorf("%v is not a native collective", coll)
	}
	if (coll == CollBroadcast || coll == CollReduce) && (h.Root < 0 || int(h.Root) >= size) {
		return 0, fmt.Errorf("root %d is outside [0, %d)", h.Root, size)
	}
	switch coll {
	case CollAllGather:
		err = checkShares(h, es, size, "recv", recv, "send", send)
	case CollReduceScatter:
		err = checkShares(h, es, size, "send", send, "recv", recv)
	default:
		if !holds(send, h.Count, es) || recv != send {
			err = fmt.Errorf("send is %d bytes and recv %d bytes; both must hold the header's count of %d %v elements (%d bytes each)",
				send, recv, h.Count, h.DType, es)
		}
	}
	if err != nil {
		return 0, err
	}
	return es, nil
}

// checkShares checks the buffers of a collective that splits its h.Count
// elements, held by whole, into size equal shares, one of which is part.
func checkShares(h Header, es, size int, wholeName string, whole int, partName string, part int) error {
	if holds(whole, h.Count, es) && size*part == whole {
		return nil
	}
	return fmt.Errorf("%s is %d bytes and %s %d bytes; %s must hold the header's count of %d %v elements (%d bytes each) and %s one of %d equal shares of it",
		wholeName, whole, partName, part, wholeName, h.Count, h.DType, es, partName, size)
}

// holds reports whether n bytes are count elements of es bytes.
func holds(n int, count uint64, es int) bool {
	return n%es == 0 && uint64(n/es) == count
}
