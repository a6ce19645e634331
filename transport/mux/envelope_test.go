package mux

import (
	"encoding/binary"
	"testing"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

func envelope(h transport.Header, comm uint32, kind byte) []byte {
	b := make([]byte, envSize)
	h.Encode(b)
	binary.LittleEndian.PutUint32(b[40:], comm)
	b[44] = kind
	return b
}

// Envelopes round-trip, and no bytes off the network make the decoder
// panic or accept a malformed frame.
func FuzzDecodeEnvelope(f *testing.F) {
	h := transport.Header{Seq: 9, Count: 100, Comm: 3, Root: -1, Coll: transport.CollAllReduce,
		DType: reduce.Float32, Op: reduce.Sum, Algo: 1, Step: 7, Len: 400}
	f.Add(envelope(h, 42, kindData))
	f.Add(envelope(transport.Header{}, 0, kindClose))
	f.Add(envelope(h, 1, 9))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, comm, kind, err := decodeEnvelope(b)
		if err != nil {
			return
		}
		if again := envelope(got, comm, kind); string(again) != string(b) {
			t.Fatalf("decoded %v comm %d kind %d does not encode back to the same bytes", got, comm, kind)
		}
	})
}

func TestDecodeEnvelope(t *testing.T) {
	h := transport.Header{Seq: 1, Coll: transport.CollBroadcast, Root: 2, Len: 5}
	got, comm, kind, err := decodeEnvelope(envelope(h, 77, kindData))
	if err != nil || got != h || comm != 77 || kind != kindData {
		t.Fatalf("got %v %d %d %v", got, comm, kind, err)
	}
	if _, _, _, err := decodeEnvelope(envelope(h, 77, 5)); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, _, _, err := decodeEnvelope(make([]byte, 10)); err == nil {
		t.Error("short envelope accepted")
	}
}
