package bootstrap

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func validFrames() []frame {
	return []frame{
		{typ: frameHello, key: storeMagic, value: []byte{protoVersion}},
		{typ: frameSet, id: 7, key: "tcp/addr/3", value: []byte("10.0.0.3:41234")},
		{typ: frameSet, id: 8, key: "empty", value: nil},
		{typ: frameGet, id: 1 << 40, key: "tcp/addr/0"},
		{typ: frameCancel, id: 9},
		{typ: frameOK, id: 7},
		{typ: frameValue, id: 3, value: []byte("v")},
		{typ: frameError, value: []byte("store protocol version 3")},
		{typ: frameChallenge, value: make([]byte, nonceLen)},
		{typ: frameProof, id: 1, value: make([]byte, nonceLen+macLen)},
		{typ: frameWelcome, id: 1, value: make([]byte, macLen)},
		{typ: frameRegister, id: 2, value: []byte(`{"rank":1,"size":2,"job":"j","host":"h","pid":7,"nonce":"ab"}`)},
		{typ: frameRoster, id: 3},
		{typ: frameCreate, id: 4, key: "shrink/1", value: []byte("0,2,3")},
		{typ: frameCreate, id: 5, key: "empty"},
		{typ: frameAdd, id: 6, key: "epoch", value: []byte("-1")},
		{typ: frameError, id: 2, key: codeDuplicate, value: []byte("rank 1 was claimed twice")},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range validFrames() {
		b := appendFrame(nil, f)
		got, rest, err := readFrame(bytes.NewReader(b), nil)
		if err != nil {
			t.Fatalf("readFrame(%+v): %v", f, err)
		}
		if got.typ != f.typ || got.id != f.id || got.key != f.key || !bytes.Equal(got.value, f.value) {
			t.Errorf("round trip: got %+v, want %+v", got, f)
		}
		if len(rest) != len(b)-4 {
			t.Errorf("buffer holds %d bytes, want %d", len(rest), len(b)-4)
		}
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	cases := map[string][]byte{
		"short":            {frameSet, 1, 2},
		"unknown type":     appendFrame(nil, frame{typ: 0x55, key: "k"})[4:],
		"key past end":     {frameGet, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 'a'},
		"key too long":     appendFrame(nil, frame{typ: frameGet, key: long})[4:],
		"get with value":   appendFrame(nil, frame{typ: frameGet, key: "k", value: []byte("x")})[4:],
		"cancel has value": appendFrame(nil, frame{typ: frameCancel, value: []byte("x")})[4:],
		"roster has value": appendFrame(nil, frame{typ: frameRoster, value: []byte("x")})[4:],
	}
	for name, b := range cases {
		if _, err := decodeFrame(b); !errors.Is(err, errBadFrame) {
			t.Errorf("%s: decodeFrame = %v, want errBadFrame", name, err)
		}
	}
	// A length prefix beyond the bound is refused before anything is read.
	huge := []byte{0xff, 0xff, 0xff, 0x7f}
	if _, _, err := readFrame(bytes.NewReader(huge), nil); !errors.Is(err, errBadFrame) {
		t.Errorf("huge length: readFrame = %v, want errBadFrame", err)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range validFrames() {
		f.Add(appendFrame(nil, fr)[4:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			return
		}
		if re := appendFrame(nil, fr)[4:]; !bytes.Equal(re, b) {
			t.Fatalf("decode then encode changed the frame:\n in %x\nout %x", b, re)
		}
		if _, _, err := readFrame(bytes.NewReader(appendFrame(nil, fr)), nil); err != nil {
			t.Fatalf("readFrame refuses a frame decodeFrame accepts: %v", err)
		}
	})
}
