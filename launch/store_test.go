package launch

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer takes the output of ranks that write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// runEnv launches two ranks of sh that print the store variables they got.
func runEnv(t *testing.T, store string) []string {
	t.Helper()
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, Config{N: 2, Command: "sh", Store: store, Stdout: &out,
		Args: []string{"-c", `echo "$RANK store=$COLLKIT_STORE external=$COLLKIT_STORE_EXTERNAL port=$MASTER_PORT"`}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	slices.Sort(lines)
	if len(lines) != 2 {
		t.Fatalf("got %q, want a line from each of 2 ranks", lines)
	}
	return lines
}

// With Store the ranks get COLLKIT_STORE and no launcher-hosted store.
func TestRunWithStore(t *testing.T) {
	for i, l := range runEnv(t, "etcd://127.0.0.1:2379/job") {
		want := string(rune('0'+i)) + " store=etcd://127.0.0.1:2379/job external= port="
		if l != want {
			t.Errorf("rank %d: %q, want %q", i, l, want)
		}
	}
}

// Without Store the ranks use the launcher's TCP store, even when this
// process has COLLKIT_STORE set.
func TestRunHostsStore(t *testing.T) {
	t.Setenv("COLLKIT_STORE", "etcd://10.9.9.9:2379/elsewhere")
	for i, l := range runEnv(t, "") {
		if !strings.HasPrefix(l, string(rune('0'+i))+" store= external=1 port=") || strings.HasSuffix(l, "port=") {
			t.Errorf("rank %d: %q, want no COLLKIT_STORE, the launcher's store and its port", i, l)
		}
	}
}

func TestRunBadStore(t *testing.T) {
	err := Run(context.Background(), Config{N: 1, Command: "true", Store: "127.0.0.1:2379"})
	if err == nil || !strings.Contains(err.Error(), "scheme://") {
		t.Fatalf("Run with a store URL without a scheme: %v, want an error saying the form", err)
	}
}
