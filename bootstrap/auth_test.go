package bootstrap

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

var testSecret = []byte("store-secret-0123456789")

func startSecretServer(t *testing.T, secret []byte) (*Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(ln)
	s.secret, s.log = secret, slog.New(slog.NewTextHandler(logs, nil))
	s.helloTimeout = 300 * time.Millisecond
	s.start()
	t.Cleanup(func() { s.Close() })
	return s, logs
}

func TestSecretMismatchRefused(t *testing.T) {
	other := []byte("some-other-secret-xyz")
	cases := []struct {
		name           string
		server, client []byte
		say, serverLog string
	}{
		{"wrong secret", testSecret, other, "COLLKIT_SECRET", "wrong job secret"},
		{"client has none", testSecret, nil, "requires the job secret", "did not answer the job secret challenge"},
		{"server has none", nil, testSecret, "does not check the job secret", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, logs := startSecretServer(t, c.server)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cl, err := DialConfig(ctx, ClientConfig{Addr: s.Addr(), Secret: c.client})
			if err == nil {
				cl.Close()
				t.Fatal("a client with the wrong secret got in")
			}
			if !strings.Contains(err.Error(), c.say) {
				t.Errorf("error %q does not say %q", err, c.say)
			}
			if c.serverLog != "" {
				// The server logs once the client is gone; wait for that by
				// closing the server, which waits for its connections.
				s.Close()
				if !strings.Contains(logs.String(), c.serverLog) {
					t.Errorf("server log %q does not say %q", logs, c.serverLog)
				}
			}
		})
	}
}

// A stranger who speaks the protocol but guesses the proof, and random
// bytes, are dropped and logged while a real client's Get waits.
func TestSecretServerSurvivesStrangers(t *testing.T) {
	s, logs := startSecretServer(t, testSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good, err := DialConfig(ctx, ClientConfig{Addr: s.Addr(), Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	got := make(chan []byte, 1)
	go func() {
		v, _ := good.Get(ctx, "k")
		got <- v
	}()

	random := make([]byte, 500)
	rand.Read(random)
	guess := make([]byte, nonceLen+macLen)
	rand.Read(guess)
	hello := appendFrame(nil, frame{typ: frameHello, key: storeMagic, value: []byte{protoVersion}})
	for name, b := range map[string][]byte{
		"random bytes":    random,
		"guessed proof":   append(hello, appendFrame(nil, frame{typ: frameProof, value: guess})...),
		"set after hello": append(hello, appendFrame(nil, frame{typ: frameSet, key: "k", value: []byte("evil")})...),
	} {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(b)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		reply, err := io.ReadAll(nc)
		nc.Close()
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("%s: server did not hang up: %v", name, err)
		}
		if strings.Contains(string(reply), "evil") {
			t.Errorf("%s: a stranger read a value", name)
		}
	}
	if err := good.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v := <-got; string(v) != "v" {
		t.Fatalf("Get = %q after strangers, want \"v\" (a stranger wrote the key?)", v)
	}
	s.Close()
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n < 3 {
		t.Errorf("%d warnings for 3 strangers:\n%s", n, out)
	}
	if !strings.Contains(out, "wrong job secret") {
		t.Errorf("no log of the guessed proof:\n%s", out)
	}
}

func TestShortSecretRefused(t *testing.T) {
	if _, err := ListenConfig(ServerConfig{Addr: "127.0.0.1:0", Secret: []byte("short")}); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
	_, err := FromEnv(getenv(map[string]string{"RANK": "0", "WORLD_SIZE": "1", "COLLKIT_SECRET": "short"}))
	if err == nil || !strings.Contains(err.Error(), "COLLKIT_SECRET") || strings.Contains(err.Error(), "short\"") {
		t.Fatalf("FromEnv with a short secret = %v, want an error naming COLLKIT_SECRET without echoing it", err)
	}
	env, err := FromEnv(getenv(map[string]string{"RANK": "0", "WORLD_SIZE": "1", "COLLKIT_SECRET": string(testSecret)}))
	if err != nil || env.Secret != string(testSecret) {
		t.Fatalf("FromEnv = %+v, %v", env, err)
	}
}
