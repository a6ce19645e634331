package transport

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/collkit/collkit/reduce"
)

// Coll names the operation a message belongs to.
type Coll uint8

// Operations a Header can name.
const (
	CollNone Coll = iota
	CollAllReduce
	CollBroadcast
	CollReduce
	CollAllGather
	CollReduceScatter
	CollGather
	CollScatter
	CollAllToAll
	CollBarrier
	CollSendRecv
)

// CollPad marks bytes a transport's framing skips, never a message: shm's
// ring writes one to start the next message at the ring's start (see
// transport/shm). A receiver passes over the header and its Len bytes.
const CollPad Coll = 0xfe

var collNames = [...]string{"none", "allreduce", "broadcast", "reduce", "allgather",
	"reducescatter", "gather", "scatter", "alltoall", "barrier", "sendrecv"}

func (c Coll) String() string {
	switch c {
	case CollAbort:
		return "abort"
	case CollPad:
		return "pad"
	}
	if int(c) < len(collNames) {
		return collNames[c]
	}
	return fmt.Sprintf("coll(%d)", uint8(c))
}

// Header frames every message. The fields above Step describe the operation
// and are the same on every message of it; Step and Len describe one message.
// A receiver compares the whole header with what it expects, which catches
// ranks that call different collectives, sizes, types, operators, roots or
// algorithms, or that lost step.
type Header struct {
	Seq   uint64       // operation number within the communicator
	Count uint64       // elements in the whole operation
	Comm  uint32       // communicator id (sub-communicators share connections)
	Root  int32        // root rank, or -1 for operations without one
	Coll  Coll         // which collective
	DType reduce.DType // element type
	Op    reduce.Op    // reduction operator, 0 if none
	Algo  uint8        // algorithm id chosen by the caller
	Step  uint32       // step inside the operation, defined by the algorithm
	Len   uint32       // payload bytes of this message
}

func (h Header) String() string {
	return fmt.Sprintf("seq=%d %s algo=%d count=%d dtype=%v op=%v root=%d comm=%d step=%d len=%d",
		h.Seq, h.Coll, h.Algo, h.Count, h.DType, h.Op, h.Root, h.Comm, h.Step, h.Len)
}

// HeaderSize is the encoded size of a Header on the wire.
const HeaderSize = 40

// Wire format constants. Version changes whenever the encoding does.
const (
	magic   = 0xC0_11
	version = 1
)

// ErrBadFrame is wrapped by Decode when bytes off the network are not a
// collkit frame of this version.
var ErrBadFrame = errors.New("not a collkit frame")

// Encode writes h into b, which must hold HeaderSize bytes.
func (h Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], magic)
	b[2] = version
	b[3] = 0 // flags, reserved
	b[4] = byte(h.Coll)
	b[5] = byte(h.DType)
	b[6] = byte(h.Op)
	b[7] = h.Algo
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Root))
	binary.LittleEndian.PutUint32(b[12:], h.Comm)
	binary.LittleEndian.PutUint32(b[16:], h.Step)
	binary.LittleEndian.PutUint32(b[20:], h.Len)
	binary.LittleEndian.PutUint64(b[24:], h.Seq)
	binary.LittleEndian.PutUint64(b[32:], h.Count)
}

// Decode reads a Header from the first HeaderSize bytes of b.
func Decode(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadFrame, len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != magic {
		return Header{}, fmt.Errorf("%w: magic %#04x", ErrBadFrame, m)
	}
	if b[2] != version {
		return Header{}, fmt.Errorf("%w: version %d, this build speaks %d", ErrBadFrame, b[2], version)
	}
	if b[3] != 0 {
		return Header{}, fmt.Errorf("%w: flags %#02x", ErrBadFrame, b[3])
	}
	return Header{
		Coll:  Coll(b[4]),
		DType: reduce.DType(b[5]),
		Op:    reduce.Op(b[6]),
		Algo:  b[7],
		Root:  int32(binary.LittleEndian.Uint32(b[8:])),
		Comm:  binary.LittleEndian.Uint32(b[12:]),
		Step:  binary.LittleEndian.Uint32(b[16:]),
		Len:   binary.LittleEndian.Uint32(b[20:]),
		Seq:   binary.LittleEndian.Uint64(b[24:]),
		Count: binary.LittleEndian.Uint64(b[32:]),
	}, nil
}

// Check returns nil when got is the message want describes, and a
// *MismatchError from peer otherwise.
func (want Header) Check(peer int, got Header) error {
	if got == want {
		return nil
	}
	return &MismatchError{Peer: peer, Want: want, Got: got}
}
