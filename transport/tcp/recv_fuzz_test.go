package tcp

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/transport"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (a, b *net.TCPConn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c.(*net.TCPConn)
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	acc := <-ch
	if acc == nil {
		t.Fatal("accept failed")
	}
	return d.(*net.TCPConn), acc
}

// FuzzRecv sends arbitrary bytes, then a hang-up, to a stream's receive
// path: header decoding, the header check, abort notices and payloads.
// Whatever arrives, recv returns (no hang, no panic), and it returns nil
// only for exactly the message it expected.
func FuzzRecv(f *testing.F) {
	want := transport.Header{Seq: 3, Count: 4, Root: -1, Coll: transport.CollAllReduce, Step: 1, Len: 16}
	good := make([]byte, transport.HeaderSize+16)
	want.Encode(good)
	f.Add(good, uint8(16))
	bigHdr := want
	bigHdr.Len = smallMax + 1
	big := make([]byte, transport.HeaderSize+smallMax+1)
	bigHdr.Encode(big)
	f.Add(big, uint8(255))
	notice := make([]byte, transport.HeaderSize+5)
	transport.Header{Coll: transport.CollAbort, Root: -1, Len: 5}.Encode(notice)
	copy(notice[transport.HeaderSize:], "oops!")
	f.Add(notice, uint8(16))
	f.Add([]byte("random bytes that are not a frame at all........"), uint8(16))
	f.Fuzz(func(t *testing.T, in []byte, size uint8) {
		n := int(size)
		if size == 255 {
			n = smallMax + 1
		}
		a, b := tcpPair(t)
		defer a.Close()
		defer b.Close()
		go func() {
			a.Write(in)
			a.CloseWrite()
		}()
		s := newStream(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h := want
		h.Len = uint32(n)
		p := make([]byte, n)
		_, err := s.recv(ctx, 1, h, p, clock.Since())
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("recv hung on %x", in)
		}
		if err == nil {
			exp := make([]byte, transport.HeaderSize)
			h.Encode(exp)
			if len(in) < transport.HeaderSize+n || string(in[:transport.HeaderSize]) != string(exp) {
				t.Fatalf("recv accepted %x as %v", in, h)
			}
		}
	})
}
