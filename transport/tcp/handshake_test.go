package tcp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/collkit/collkit/transport"
)

func validHellos() []hello {
	return []hello{
		{Rank: 1, Target: 0, Size: 2, Stream: 0, Streams: 1, JobID: "default"},
		{Rank: 7, Target: 3, Size: 8, Stream: 2, Streams: 3, Flags: 1, JobID: ""},
		{Rank: 1<<32 - 1, Target: 1<<32 - 1, Size: 1<<32 - 1, Stream: 65535, Streams: 65535, JobID: string(make([]byte, maxJobIDLen))},
	}
}

func validReplies() []reply {
	return []reply{
		{Accept: true},
		{Reason: reasonJob, Rank: 0, Size: 4, Streams: 2, JobID: "job-A"},
		{Reason: reasonDuplicate, Rank: 3, Size: 8, Streams: 1},
		{Reason: reasonAuth},
		{Accept: true, Authed: true, MAC: [macLen]byte{1, 2, 3, 31: 0xff}},
	}
}

func TestHandshakeRoundTrip(t *testing.T) {
	for _, h := range validHellos() {
		b := appendHello(nil, h)
		got, err := decodeHello(b)
		if err != nil || got != h {
			t.Errorf("hello %+v: decoded %+v, %v", h, got, err)
		}
		if m, err := readMsg(bytes.NewReader(b)); err != nil || !bytes.Equal(m, b) {
			t.Errorf("readMsg: %x, %v", m, err)
		}
		if _, err := decodeReply(b); err == nil {
			t.Error("a hello decoded as a reply")
		}
	}
	for _, r := range validReplies() {
		got, err := decodeReply(appendReply(nil, r))
		if err != nil || got != r {
			t.Errorf("reply %+v: decoded %+v, %v", r, got, err)
		}
		if r.explain(hello{}) == "" {
			t.Errorf("reason %v has no explanation", r.Reason)
		}
	}
}

func TestHandshakeRejectsGarbage(t *testing.T) {
	good := appendHello(nil, validHellos()[0])
	cases := map[string][]byte{
		"empty":        nil,
		"http":         []byte("GET / HTTP/1.1\r\n\r\n"),
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"job too long": append(appendMsg(nil, msgHello, helloFixed+2), make([]byte, helloFixed+2)...),
		"huge body":    {'C', 'K', 'T', 'C', hsVersion, msgHello, 0xff, 0xff},
	}
	for name, b := range cases {
		if _, err := decodeHello(b); !errors.Is(err, errBadHandshake) {
			t.Errorf("%s: decodeHello = %v, want errBadHandshake", name, err)
		}
	}
	v2 := append([]byte{}, good...)
	v2[4] = 2
	if _, err := decodeHello(v2); !errors.Is(err, errVersion) {
		t.Errorf("other version: %v, want errVersion", err)
	}
}

func FuzzDecodeHandshake(f *testing.F) {
	for _, h := range validHellos() {
		f.Add(appendHello(nil, h))
	}
	for _, r := range validReplies() {
		f.Add(appendReply(nil, r))
	}
	nonce := [nonceLen]byte{7, 31: 9}
	f.Add(appendChallenge(nil, &nonce))
	f.Add(appendProof(nil, proof{Nonce: nonce, MAC: [macLen]byte{5, 31: 6}}))
	f.Add(appendWaits(nil, nil))
	f.Add(appendWaits(nil, []transport.Wait{
		{Peer: 3, Op: "recv", Header: transport.Header{Seq: 1 << 40, Coll: transport.CollAllReduce, Step: 7, Len: 1 << 20}, Waited: 5 * time.Second},
		{Peer: 1, Op: "send", Failed: true, Header: transport.Header{Seq: 2, Coll: transport.CollBarrier}, Waited: time.Millisecond},
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ws, err := decodeWaits(b, time.Now()); err == nil {
			if re := appendWaits(nil, ws); !bytes.Equal(re, b) {
				t.Fatalf("waits changed in a round trip:\n in %x\nout %x", b, re)
			}
		}
		if n, err := decodeChallenge(b); err == nil {
			if re := appendChallenge(nil, &n); !bytes.Equal(re, b) {
				t.Fatalf("challenge changed in a round trip:\n in %x\nout %x", b, re)
			}
		}
		if p, err := decodeProof(b); err == nil {
			if re := appendProof(nil, p); !bytes.Equal(re, b) {
				t.Fatalf("proof changed in a round trip:\n in %x\nout %x", b, re)
			}
		}
		if h, err := decodeHello(b); err == nil {
			if re := appendHello(nil, h); !bytes.Equal(re, b) {
				t.Fatalf("hello changed in a round trip:\n in %x\nout %x", b, re)
			}
			if m, err := readMsg(bytes.NewReader(b)); err != nil || !bytes.Equal(m, b) {
				t.Fatalf("readMsg refuses a hello decodeHello accepts: %v", err)
			}
		}
		if r, err := decodeReply(b); err == nil {
			if re := appendReply(nil, r); !bytes.Equal(re, b) {
				t.Fatalf("reply changed in a round trip:\n in %x\nout %x", b, re)
			}
		}
	})
}
