package transporttest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/transporttest"
)

// The suite is only as good as its power to fail. Each case runs one of its
// tests in a child process against a mem transport with one defect and
// expects that test, and only the suite's verdict, to fail.

const mutantEnv = "COLLKIT_TRANSPORTTEST_MUTANT"

// mutant wraps a correct transport and breaks one promise.
type mutant struct {
	transport.Transport
	defect string
}

func (m *mutant) Rank() int {
	if m.defect == "rank" {
		return 0
	}
	return m.Transport.Rank()
}

func (m *mutant) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	switch m.defect {
	case "headerless":
		h = transport.Header{}
	case "corrupt":
		if len(p) > 1000 {
			q := append([]byte(nil), p...)
			q[len(q)/2] ^= 1
			p = q
		}
	}
	return m.bare(m.Transport.Send(ctx, peer, h, p))
}

func (m *mutant) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if m.defect == "headerless" {
		h = transport.Header{}
	}
	return m.bare(m.Transport.Recv(ctx, peer, h, p))
}

func (m *mutant) Close() error {
	if m.defect == "deafclose" {
		return nil
	}
	return m.Transport.Close()
}

// bare strips the PeerError when the defect says so.
func (m *mutant) bare(err error) error {
	var pe *transport.PeerError
	if m.defect == "bare" && errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// TestMutant runs the suite against the defective transport named by the
// environment; it is a child process of TestSuiteFails and skips otherwise.
func TestMutant(t *testing.T) {
	defect, ok := os.LookupEnv(mutantEnv)
	if !ok {
		t.Skip("run by TestSuiteFails")
	}
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		n := mem.NewNetwork(size, mem.Config{})
		t.Cleanup(func() { n.Close() })
		ts := n.Transports()
		for i, tr := range ts {
			ts[i] = &mutant{tr, defect}
		}
		return ts
	})
}

func TestSuiteFails(t *testing.T) {
	cases := []struct {
		defect, test string
		fails        bool
	}{
		{"none", "Mismatch", false}, // the harness itself passes a good transport
		{"none", "Ordered", false},
		{"rank", "RankSize", true},
		{"corrupt", "Ordered", true},
		{"corrupt", "FullDuplex", true},
		{"headerless", "Mismatch/Seq", true},
		{"headerless", "Ring", false}, // headers are all that this defect loses
		{"bare", "BadPeer", true},
		{"bare", "RecvDeadline", true},
		{"deafclose", "CloseTwice", true},
	}
	for _, c := range cases {
		t.Run(c.defect+"/"+c.test, func(t *testing.T) {
			pattern := "^TestMutant$"
			for _, name := range strings.Split(c.test, "/") {
				pattern += "/^" + name + "$"
			}
			args := []string{"-test.run=" + pattern, "-test.v", "-test.timeout=2m"}
			if testing.Short() {
				args = append(args, "-test.short")
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
			// atexit_sleep_ms: a race-enabled child otherwise idles a second on exit.
			cmd.Env = append(os.Environ(), mutantEnv+"="+c.defect,
				"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("running the child test: %v", err)
			}
			failed := strings.Contains(string(out), "--- FAIL: TestMutant/"+c.test)
			passed := strings.Contains(string(out), "--- PASS: TestMutant/"+c.test)
			switch {
			case c.fails && (!failed || err == nil):
				t.Errorf("the suite's %s test passed a transport with defect %q:\n%s", c.test, c.defect, out)
			case !c.fails && (!passed || err != nil):
				t.Errorf("the suite's %s test failed a transport with defect %q:\n%s", c.test, c.defect, out)
			case strings.Contains(string(out), "panic:"):
				t.Errorf("the child panicked:\n%s", out)
			}
		})
	}
}
