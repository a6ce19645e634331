package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The store speaks length-prefixed frames over one TCP connection per
// client. Every frame is
//
//	length uint32 | type uint8 | id uint64 | keyLen uint16 | key | value
//
// little endian, where length counts the bytes after itself and value runs to
// the end of the frame. A client opens with a hello frame (key storeMagic,
// value [protoVersion]); the server answers it with frameOK, or, when it has
// a job secret, with a challenge that the client must answer with a proof
// before the server welcomes it (see auth.go). Requests carry an
// id the client picks; the reply to a request carries the same id, so one
// connection serves many concurrent calls and a Get that waits on the server
// does not hold up the others.
const (
	frameHello     byte = 1 // key storeMagic, value [protoVersion]
	frameSet       byte = 2 // key, value
	frameGet       byte = 3 // key; answered when the key is set
	frameCancel    byte = 4 // id of a Get the client no longer waits for
	frameProof     byte = 5 // value: client nonce, client MAC
	frameRegister  byte = 6 // value: the client's Identity as JSON (register.go)
	frameRoster    byte = 7 // answered with a frameValue: the Roster as JSON
	frameCreate    byte = 8 // key, value; answered with a frameValue: the key's value after it
	frameAdd       byte = 9 // key, value: the delta in decimal; answered with a frameValue: the sum in decimal
	frameOK        byte = 0x81
	frameValue     byte = 0x82 // value of the Get with this id
	frameError     byte = 0x83 // value is a message for the user; key, if any, a code (register.go)
	frameChallenge byte = 0x84 // value: server nonce
	frameWelcome   byte = 0x85 // value: server MAC; the client is authenticated
)

const (
	storeMagic = "collkit/store"
	// 2: registration (frameRegister, frameRoster); 3: frameCreate, frameAdd.
	protoVersion = 3

	// MaxKeyLen and MaxValueLen bound what the store accepts, so that a
	// broken or hostile client cannot make the server allocate without limit.
	MaxKeyLen   = 1 << 10
	MaxValueLen = 1 << 20

	frameFixed = 1 + 8 + 2 // type, id, key length
	maxFrame   = frameFixed + MaxKeyLen + MaxValueLen
)

// errBadFrame is wrapped by decodeFrame and readFrame for bytes that are not a
// store frame.
var errBadFrame = errors.New("not a collkit store frame")

type frame struct {
	typ   byte
	id    uint64
	key   string
	value []byte
}

// appendFrame appends f, length prefix included, to dst.
func appendFrame(dst []byte, f frame) []byte {
	n := frameFixed + len(f.key) + len(f.value)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, f.typ)
	dst = binary.LittleEndian.AppendUint64(dst, f.id)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(f.key)))
	dst = append(dst, f.key...)
	return append(dst, f.value...)
}

// CheckSizes reports a key longer than MaxKeyLen or a value longer than
// MaxValueLen. Every Store calls it, those in other packages (etcdstore)
// included, so that a job behaves the same on any store.
func CheckSizes(key string, value []byte) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("bootstrap: key of %d bytes is longer than the limit of %d", len(key), MaxKeyLen)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("bootstrap: value of key %q has %d bytes, more than the limit of %d", key, len(value), MaxValueLen)
	}
	return nil
}

// decodeFrame decodes the body of one frame, the bytes after the length
// prefix. The returned value aliases b.
func decodeFrame(b []byte) (frame, error) {
	if len(b) < frameFixed {
		return frame{}, fmt.Errorf("%w: %d bytes, need at least %d", errBadFrame, len(b), frameFixed)
	}
	if len(b) > maxFrame {
		return frame{}, fmt.Errorf("%w: %d bytes, limit %d", errBadFrame, len(b), maxFrame)
	}
	f := frame{typ: b[0], id: binary.LittleEndian.Uint64(b[1:])}
	kl := int(binary.LittleEndian.Uint16(b[9:]))
	rest := b[frameFixed:]
	if kl > MaxKeyLen || kl > len(rest) {
		return frame{}, fmt.Errorf("%w: key length %d with %d bytes left", errBadFrame, kl, len(rest))
	}
	f.key, f.value = string(rest[:kl]), rest[kl:]
	switch f.typ {
	case frameHello, frameSet, frameValue, frameError, frameProof, frameChallenge, frameWelcome, frameRegister, frameCreate, frameAdd:
	case frameGet, frameCancel, frameOK, frameRoster:
		if len(f.value) != 0 {
			return frame{}, fmt.Errorf("%w: type %#x carries a %d-byte value", errBadFrame, f.typ, len(f.value))
		}
	default:
		return frame{}, fmt.Errorf("%w: unknown type %#x", errBadFrame, f.typ)
	}
	if len(f.value) > MaxValueLen {
		return frame{}, fmt.Errorf("%w: value of %d bytes, limit %d", errBadFrame, len(f.value), MaxValueLen)
	}
	return f, nil
}

// readFrame reads one frame from r into buf, growing it as needed, and
// decodes it. The frame's value aliases the returned buffer.
func readFrame(r io.Reader, buf []byte) (frame, []byte, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return frame{}, buf, err
	}
	n := binary.LittleEndian.Uint32(lb[:])
	if n < frameFixed || n > maxFrame {
		return frame{}, buf, fmt.Errorf("%w: length %d outside [%d, %d]", errBadFrame, n, frameFixed, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, buf, err
	}
	f, err := decodeFrame(buf)
	return f, buf, err
}
