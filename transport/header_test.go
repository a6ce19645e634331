package transport

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/collkit/collkit/reduce"
)

func validHeaders() []Header {
	return []Header{
		{},
		{Seq: 1, Count: 1000, Root: -1, Coll: CollAllReduce, DType: reduce.Float32, Op: reduce.Sum, Algo: 2, Step: 5, Len: 4000},
		{Seq: 1<<64 - 1, Count: 1<<64 - 1, Comm: 1<<32 - 1, Root: 1<<31 - 1, Coll: CollBroadcast, Step: 1<<32 - 1, Len: 1<<32 - 1},
		{Coll: CollAbort, Root: -1, Len: 12},
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range validHeaders() {
		b := make([]byte, HeaderSize)
		h.Encode(b)
		got, err := Decode(b)
		if err != nil || got != h {
			t.Errorf("%v: decoded %v, %v", h, got, err)
		}
		if err := h.Check(3, got); err != nil {
			t.Errorf("Check of an equal header: %v", err)
		}
	}
	b := make([]byte, HeaderSize)
	validHeaders()[1].Encode(b)
	for name, bad := range map[string][]byte{
		"short":   b[:HeaderSize-1],
		"magic":   append([]byte{0, 0}, b[2:]...),
		"version": append(append(append([]byte{}, b[:2]...), 9), b[3:]...),
		"flags":   append(append(append([]byte{}, b[:3]...), 1), b[4:]...),
	} {
		if _, err := Decode(bad); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: Decode = %v, want ErrBadFrame", name, err)
		}
	}
}

func TestMismatchErrorNamesEveryDifference(t *testing.T) {
	want := validHeaders()[1]
	got := want
	got.Count, got.DType, got.Op, got.Root, got.Coll, got.Algo = 7, reduce.Int32, reduce.Max, 3, CollBroadcast, 1
	err := want.Check(2, got)
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) || me.Peer != 2 {
		t.Fatalf("Check = %v", err)
	}
	for _, field := range []string{"count", "dtype", "op", "root", "collective", "algorithm", "rank 2"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}

// FuzzDecodeHeader feeds arbitrary bytes to the frame header decoder, the
// first thing a receiver does with bytes off the network.
func FuzzDecodeHeader(f *testing.F) {
	for _, h := range validHeaders() {
		b := make([]byte, HeaderSize)
		h.Encode(b)
		f.Add(b)
	}
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		re := make([]byte, HeaderSize)
		h.Encode(re)
		if !bytes.Equal(re, b[:HeaderSize]) {
			t.Fatalf("header changed in a round trip:\n in %x\nout %x", b[:HeaderSize], re)
		}
		_ = h.String()
		if err := h.Check(1, h); err != nil {
			t.Fatalf("a header does not match itself: %v", err)
		}
		other := h
		other.Step++
		if err := h.Check(1, other); err == nil || err.Error() == "" {
			t.Fatal("headers differing in step match")
		}
	})
}
