package tcp

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
)

// BenchmarkPingPong bounces a message between two ranks: rank 0 sends,
// rank 1 receives and sends it back. SetBytes counts both directions, so
// MB/s is the one-way bandwidth; ns/op is a round trip and us/oneway half of
// it. cc=default is the transport's congestion control (cubic, else reno),
// cc=system the kernel's (bbr on the VM the README measures).
func BenchmarkPingPong(b *testing.B) {
	for _, tc := range []struct {
		streams int
		cc      string
	}{{1, ""}, {2, ""}, {1, CongestionSystem}, {2, CongestionSystem}} {
		streams := tc.streams
		ts := newWorld(b, 2, nil, func(c *Config) { c.Streams, c.Congestion = streams, tc.cc })
		for _, size := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("cc=%s/streams=%d/size=%s", cmp.Or(tc.cc, "default"), streams, byteSize(size)), func(b *testing.B) {
				ctx := context.Background()
				h := hdr(0)
				out, in := make([]byte, size), make([]byte, size)
				back := make([]byte, size)
				done := make(chan error, 1)
				go func() {
					for range b.N {
						if err := ts[1].Recv(ctx, 0, h, back); err != nil {
							done <- err
							return
						}
						if err := ts[1].Send(ctx, 0, h, back); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				b.SetBytes(2 * int64(size))
				b.ResetTimer()
				for range b.N {
					if err := ts[0].Send(ctx, 1, h, out); err != nil {
						b.Fatal(err)
					}
					if err := ts[0].Recv(ctx, 1, h, in); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1e3, "us/oneway")
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkRawPingPong is the same exchange over a bare loopback TCP
// connection with kernel-default buffers and no framing: the baseline the
// transport's overhead is measured against.
func BenchmarkRawPingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	c := <-accepted
	defer c.Close()
	for _, size := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
		b.Run("size="+byteSize(size), func(b *testing.B) {
			out, in, back := make([]byte, size), make([]byte, size), make([]byte, size)
			done := make(chan error, 1)
			go func() {
				for range b.N {
					if _, err := io.ReadFull(c, back); err != nil {
						done <- err
						return
					}
					if _, err := c.Write(back); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b.SetBytes(2 * int64(size))
			b.ResetTimer()
			for range b.N {
				if _, err := a.Write(out); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(a, in); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1e3, "us/oneway")
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
