package collkit

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport/shm"
)

// AutoTransport takes shared memory only for a job wholly on this host
// that asks for nothing only TCP has, and says why it took what it took.
func TestChooseTransport(t *testing.T) {
	local := bootstrap.Env{Size: 4, LocalSize: 4}
	type choice struct {
		name string
		env  bootstrap.Env
		opts Options
		want string
		why  string
	}
	cases := []choice{
		{"two hosts", bootstrap.Env{Size: 4, LocalSize: 2}, Options{}, "tcp", "not all on this host (the launcher says 2)"},
		{"local size unknown", bootstrap.Env{Size: 4}, Options{}, "tcp", "not all on this host"},
		{"streams", local, Options{Streams: 2}, "tcp", "Streams 2 asks for TCP"},
		{"tls", local, Options{TLS: &tls.Config{}}, "tcp", "TLS asks for TCP"},
		{"congestion", local, Options{TCPCongestion: "reno"}, "tcp", "TCPCongestion reno"},
		{"spin wait", local, Options{SpinWait: -1}, "tcp", "SpinWait"},
		{"simulated nodes", local, Options{SimulatedNodes: 2}, "tcp", "2 simulated nodes"},
		{"nccl inside nodes", local, Options{IntraNode: "nccl"}, "tcp", "NCCL inside nodes"},
		{"too many ranks", bootstrap.Env{Size: shm.MaxSize + 1, LocalSize: shm.MaxSize + 1}, Options{}, "tcp", "Size"},
	}
	if shmAvailable() == nil {
		cases = append(cases, choice{"one host", local, Options{}, "shm", "all 4 ranks on this host"})
	}
	for _, c := range cases {
		got, why := ChooseTransport(c.env, c.opts)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, got, why, c.want, c.why)
		}
	}
	if err := TransportAvailable(AutoTransport); err != nil {
		t.Errorf("TransportAvailable(auto) = %v", err)
	}
}

// Ranks that connect with Transport "auto" on one host run over shared
// memory, and their all-reduce is right element by element.
func TestConnectAuto(t *testing.T) {
	if err := shmAvailable(); err != nil {
		t.Skip(err)
	}
	const n = 3
	port := setupPort(t)
	ranks := make([]*setupRank, n)
	for r := range ranks {
		env := torchEnv(port, r, n)
		env.LocalRank, env.LocalSize = r, n
		ranks[r] = &setupRank{env: env, opts: Options{Transport: AutoTransport}}
	}
	connectAll(t, ranks)
	cs := make([]*Comm, n)
	for r, rk := range ranks {
		if rk.err != nil {
			t.Fatalf("rank %d: %v", r, rk.err)
		}
		if _, ok := rk.comm.Transport().(*shm.Transport); !ok {
			t.Fatalf("rank %d runs over %T, want shared memory", r, rk.comm.Transport())
		}
		cs[r] = rk.comm
	}
	outs := make([][]float32, n)
	errs := onEvery(cs, func(r int, c *Comm) error {
		in := []float32{float32(r), float32(10 * r), 1}
		outs[r] = make([]float32, len(in))
		return AllReduce(context.Background(), c, in, outs[r], Sum)
	})
	want := []float32{0 + 1 + 2, 0 + 10 + 20, n}
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i := range want {
			if outs[r][i] != want[i] {
				t.Errorf("rank %d element %d: %v, want %v", r, i, outs[r][i], want[i])
			}
		}
	}
}

// A joiner cannot run "auto": it takes the transport the members run, and
// is told so at the call.
func TestJoinAutoRefused(t *testing.T) {
	_, err := JoinStore(context.Background(), bootstrap.Env{Rank: 0, Size: 2}, nil, Options{Transport: AutoTransport})
	if !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "name it") {
		t.Fatalf("Join with Transport auto: %v", err)
	}
}
