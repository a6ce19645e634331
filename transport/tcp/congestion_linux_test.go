package tcp

import (
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// checkCongestion fails unless every stream of every transport in ts runs
// congestion control want.
func checkCongestion(t *testing.T, ts []*Transport, want string) {
	t.Helper()
	for _, tr := range ts {
		for r, pr := range tr.peers {
			if pr == nil {
				continue
			}
			for i, s := range pr.streams {
				var got string
				var err error
				s.raw.Control(func(fd uintptr) {
					got, err = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
				})
				if err != nil || got != want {
					t.Fatalf("rank %d to rank %d stream %d: congestion control %q (%v), want %q", tr.Rank(), r, i, got, err, want)
				}
			}
		}
	}
}

func TestCongestionDefaultIsCubicOrReno(t *testing.T) {
	ts := newWorld(t, 2, nil, func(c *Config) { c.Streams = 2 })
	want := ts[0].Congestion()
	if want != "cubic" && want != "reno" {
		t.Fatalf("default congestion control %q, want cubic or reno (reno is always allowed)", want)
	}
	checkCongestion(t, ts, want)
}

func TestCongestionNamed(t *testing.T) {
	ts := newWorld(t, 2, nil, func(c *Config) { c.Congestion = "reno" })
	if got := ts[1].Congestion(); got != "reno" {
		t.Fatalf("Congestion() = %q, want reno", got)
	}
	checkCongestion(t, ts, "reno")
}

func TestCongestionSystemKeepsTheKernelsDefault(t *testing.T) {
	ts := newWorld(t, 2, nil, func(c *Config) { c.Congestion = CongestionSystem })
	if got := ts[0].Congestion(); got != CongestionSystem {
		t.Fatalf("Congestion() = %q, want %q", got, CongestionSystem)
	}
	checkCongestion(t, ts, sysctl("tcp_congestion_control"))
}

func TestCongestionUnknownFailsNew(t *testing.T) {
	_, err := New(Config{Rank: 1, Size: 2, Congestion: "no-such-control"})
	if err == nil {
		t.Fatal("New accepted congestion control no-such-control")
	}
	for _, want := range []string{"rank 1", `"no-such-control"`, "may set", `"system"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}

// A listener from Listen hands its connections the congestion control
// before they start: no tune, no Connect.
func TestListenSetsCongestionOnAccepted(t *testing.T) {
	ln, err := Listen("127.0.0.1", "reno")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	raw, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	raw.Control(func(fd uintptr) {
		got, err = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if err != nil || got != "reno" {
		t.Fatalf("accepted connection runs %q (%v), want reno", got, err)
	}
	if _, err := Listen("127.0.0.1", "no-such-control"); err == nil || !strings.Contains(err.Error(), "no-such-control") {
		t.Fatalf("Listen with an unknown control: %v, want an error naming it", err)
	}
}
