package main

import (
	"context"
	"github.com/collkit/collkit/launch"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/mem"
)

// Every mode of a step leaves exact gradients (checked element by element
// by checkAll) on every rank, for odd sizes too.
func TestSteps(t *testing.T) {
	const n = 3
	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range net.Transports() {
		wg.Go(func() {
			comm, err := collkit.New(tr, collkit.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			defer comm.Close()
			m := newModel(comm, 5, 1001, 3)
			ctx := context.Background()
			for _, step := range []func(context.Context) error{m.blocking, m.overlapped} {
				for i := range m.grads {
					clear(m.grads[i])
				}
				if _, err := m.timeStep(ctx, step, true); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Started by hand, the program launches its ranks and rank 0 prints a line
// per mode.
func TestLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the program")
	}
	exe := t.TempDir() + "/dataparallel"
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(exe, "-np", "2", "-layers", "3", "-params", "500", "-work", "2", "-steps", "2", "-offcpu", "1ms")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"compute only", "all-reduce only", "blocking", "overlapped", "overlap saves", "1ms off the CPU per layer"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// cleanEnv is the environment without launcher variables, so the program
// launches its own ranks even when the test runs under one.
func cleanEnv() []string { return launch.WithoutLauncherEnv(os.Environ()) }
