package tcp

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

var testSecret = []byte("0123456789abcdef-job-secret")

func TestSecretMeshWorks(t *testing.T) {
	ts := newWorld(t, 3, nil, func(c *Config) { c.Secret = testSecret; c.Streams = 2 })
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() { errc <- ts[2].Send(ctx, 0, hdr(0), []byte("authenticated")) }()
	got := make([]byte, len("authenticated"))
	if err := ts[0].Recv(ctx, 2, hdr(0), got); err != nil || string(got) != "authenticated" {
		t.Fatalf("Recv = %q, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestShortSecretRefused(t *testing.T) {
	_, err := New(Config{Rank: 0, Size: 2, Secret: []byte("short")})
	if err == nil || !strings.Contains(err.Error(), "Secret") {
		t.Fatalf("New with a 5-byte secret = %v, want an error about Secret", err)
	}
}

// Ranks whose secrets differ, or where only one side has one, refuse each
// other and say what to fix.
func TestSecretMismatch(t *testing.T) {
	other := []byte("another-secret-of-16+")
	cases := []struct {
		name       string
		s0, s1     []byte
		say1, say0 string
	}{
		{"different", testSecret, other, "COLLKIT_SECRET", "wrong job secret"},
		{"dialer has none", testSecret, nil, "has none", "no job secret offered"},
		{"acceptor has none", nil, testSecret, "COLLKIT_SECRET", "this rank has none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := bootstrap.NewMemStore()
			logs := &syncBuffer{}
			t0, _ := New(Config{Rank: 0, Size: 2, JobID: "j", Secret: c.s0, ConnectTimeout: time.Second})
			t1, _ := New(Config{Rank: 1, Size: 2, JobID: "j", Secret: c.s1, ConnectTimeout: time.Second})
			defer t0.Close()
			defer t1.Close()
			t0.log, t1.log = slog.New(slog.NewTextHandler(logs, nil)), quiet
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- t0.Connect(ctx, store) }()
			err := t1.Connect(ctx, store)
			var pe *transport.PeerError
			if !errors.Is(err, transport.ErrRejected) || !errors.As(err, &pe) || pe.Rank != 0 || !strings.Contains(err.Error(), c.say1) {
				t.Errorf("rank 1: Connect = %v, want a rejection by rank 0 mentioning %q", err, c.say1)
			}
			err0 := <-errc
			if err0 == nil {
				t.Fatal("rank 0 connected to a rank with another secret")
			}
			if !strings.Contains(err0.Error(), c.say0) || !strings.Contains(logs.String(), c.say0) {
				t.Errorf("rank 0: %v\nlogs: %s\nwant %q in both", err0, logs, c.say0)
			}
		})
	}
}

// Strangers who know the job id, rank and size but not the secret, and
// random bytes, are turned away while the real ranks connect; the reject
// reveals nothing about the job.
func TestStrangersWithoutSecret(t *testing.T) {
	const size = 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, logs, store, addr, done0 := listeningJob(t, ctx, size, Config{Secret: testSecret})
	good := hello{Rank: 1, Target: 0, Size: size, Stream: 0, Streams: 1, JobID: "job-A"}
	random := make([]byte, 300)
	rand.Read(random)

	dial := func() net.Conn {
		nc, err := net.Dial("tcp", string(addr))
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		return nc
	}
	expectAuthReject := func(name string, nc net.Conn) {
		b, err := readMsg(nc)
		rep, derr := decodeReply(b)
		if err != nil || derr != nil || rep.Accept || rep.Reason != reasonAuth {
			t.Errorf("%s: reply %+v (%v, %v), want a reject for the secret", name, rep, err, derr)
		}
		if rep.JobID != "" || rep.Size != 0 {
			t.Errorf("%s: the reject told a stranger job %q, size %d", name, rep.JobID, rep.Size)
		}
	}

	// No secret offered.
	nc := dial()
	nc.Write(appendHello(nil, good))
	expectAuthReject("no secret", nc)
	nc.Close()

	// A guessed proof.
	nc = dial()
	h := good
	h.Flags = flagAuth
	nc.Write(appendHello(nil, h))
	b, err := readMsg(nc)
	if _, cerr := decodeChallenge(b); err != nil || cerr != nil {
		t.Fatalf("no challenge after an authenticated hello: %x, %v, %v", b, err, cerr)
	}
	var p proof
	rand.Read(p.Nonce[:])
	rand.Read(p.MAC[:])
	nc.Write(appendProof(nil, p))
	expectAuthReject("guessed proof", nc)
	nc.Close()

	// Random bytes.
	nc = dial()
	nc.Write(random)
	if b, err := readMsg(nc); err == nil {
		t.Errorf("random bytes got a reply %x", b)
	}
	nc.Close()

	connect(t, store, ts[1], ts[2])
	if err := <-done0; err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- ts[1].Send(ctx, 0, hdr(0), []byte("real")) }()
	got := make([]byte, 4)
	if err := ts[0].Recv(ctx, 1, hdr(0), got); err != nil || string(got) != "real" {
		t.Fatalf("Recv = %q, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"no job secret offered", "wrong job secret", "not a collkit tcp handshake"} {
		if !strings.Contains(out, want) {
			t.Errorf("no log of %q:\n%s", want, out)
		}
	}
}
