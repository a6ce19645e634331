package etcdstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/bootstrap/etcdstore"
	"github.com/collkit/collkit/bootstrap/storetest"
)

// startEtcd runs an etcd server on loopback ports with a fresh data dir
// and returns its client endpoint; the server is killed when the test
// ends. It skips the test when there is no etcd binary.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skipf("no etcd binary in PATH (%v): install it (apt-get install etcd-server) to run the etcd store tests", err)
	}
	client, peer := freePort(t), freePort(t)
	dir := t.TempDir()
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--name", "collkit-test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "collkit-test="+peerURL)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
	})
	// Wait until it answers (Dial retries within its timeout), or it dies.
	ep := fmt.Sprintf("127.0.0.1:%d", client)
	ready := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: []string{ep}})
		if err == nil {
			s.Close()
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("etcd did not come up: %v\n%s", err, log)
		}
	case err := <-exited:
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("etcd exited: %v\n%s", err, log)
	}
	return ep
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func dial(t *testing.T, ep, prefix string) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: []string{ep}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	ep := startEtcd(t)
	n := 0
	storetest.Run(t, func(t *testing.T) bootstrap.Store {
		n++ // a fresh prefix is a fresh store
		return dial(t, ep, fmt.Sprintf("conformance/%d/", n))
	})
}

// Jobs under different prefixes do not see each other's keys; a key is
// stored under the prefix.
func TestPrefixIsolation(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, root := dial(t, ep, "job-a/"), dial(t, ep, "job-b/"), dial(t, ep, "")
	if err := a.Set(ctx, "addr/0", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Create(ctx, "addr/0", []byte("y")); err != nil || string(v) != "y" {
		t.Fatalf("Create under another prefix = %q, %v; want its own value \"y\"", v, err)
	}
	if n, err := b.Add(ctx, "n", 2); err != nil || n != 2 {
		t.Fatalf("Add under job-b = %d, %v", n, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if v, err := a.Get(short, "n"); err == nil {
		t.Fatalf("job-a sees job-b's counter: %q", v)
	}
	for key, want := range map[string]string{"job-a/addr/0": "x", "job-b/addr/0": "y", "job-b/n": "2"} {
		if v, err := root.Get(ctx, key); err != nil || string(v) != want {
			t.Errorf("Get(%q) at the root = %q, %v; want %q", key, v, err, want)
		}
	}
}

// Dial of an endpoint where no etcd runs fails within its timeout, saying
// what to check.
func TestDialNothingThere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	_, err := etcdstore.Dial(ctx, etcdstore.Config{Endpoints: []string{ep}, DialTimeout: 300 * time.Millisecond})
	if err == nil {
		t.Fatal("Dial of a port nobody listens on succeeded")
	}
	if want := ep; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "COLLKIT_STORE") {
		t.Errorf("error %q does not name %s and COLLKIT_STORE", err, want)
	}
}
