package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/collkit/collkit"
)

// children lists the pids of pid's child processes (Linux /proc; every
// thread records the children it forked).
func children(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// rankOf reads RANK from a process's environment.
func rankOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := strings.CutPrefix(string(kv), "RANK="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// One kill trial with real processes (scripts/kill-trials.sh runs many):
// a worker killed with SIGKILL mid-benchmark makes collbench exit non-zero
// quickly, every survivor names the dead rank and prints a stall report,
// and no worker is left behind.
func TestKillWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc to find the workers")
	}
	const np = 3
	cmd := exec.Command(binary, "--np", strconv.Itoa(np), "-b", "64K", "-e", "64M", "-n", "200", "--timeout", "10s")
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Wait for the first result row: the ranks are connected and running.
	workers, victimPid, victim := pickWorker(t, cmd, stdout, stderr, np, func(line string) bool {
		return strings.HasPrefix(strings.TrimSpace(line), "65536")
	})
	killed := time.Now()
	if err := syscall.Kill(victimPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("collbench still running 60 s after rank %d was killed; stderr:\n%s", victim, stderr.String())
	}
	took := time.Since(killed)
	if err == nil {
		t.Fatal("collbench exited 0 after a rank was killed")
	}
	out := stderr.String()
	if !strings.Contains(out, fmt.Sprintf("rank %d was killed by signal killed", victim)) {
		t.Errorf("the launcher does not report the killed rank %d:\n%s", victim, out)
	}
	for r := range np {
		if r == victim {
			continue
		}
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, fmt.Sprintf("collbench: rank %d: ", r)) {
				line = l
				break
			}
		}
		switch {
		case line == "":
			t.Errorf("rank %d printed no error:\n%s", r, out)
		case !strings.Contains(line, fmt.Sprintf("rank %d died", victim)) && !strings.Contains(line, fmt.Sprintf("dead: rank %d", victim)):
			t.Errorf("rank %d does not name the dead rank %d: %s", r, victim, line)
		case !strings.Contains(line, "stall report"):
			t.Errorf("rank %d printed no stall report: %s", r, line)
		}
	}
	for _, pid := range workers {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("worker %d still running", pid)
		}
	}
	t.Logf("rank %d killed; collbench exited (%v) %v later", victim, err, took.Round(time.Millisecond))
}

// lockedBuffer is a bytes.Buffer safe to read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// One stop trial with real processes over each transport
// (scripts/stall-trials.sh runs many): a worker stopped with SIGSTOP
// mid-benchmark (stuck, not dead) is named as not responding first in
// every other rank's stall report, within the timeout and the probe
// window, and no live rank is named; the launcher kills the stopped worker
// and exits non-zero. Over tcp the stopped process does not answer a
// probe; over shared memory the probe reads its state (T) in /proc.
func TestStopWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc to find the workers")
	}
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) { stopTrial(t, tr) })
	}
}

func stopTrial(t *testing.T, transport string) {
	const np, timeout = 4, 3 * time.Second
	cmd := exec.Command(binary, "--np", strconv.Itoa(np), "--transport", transport, "--algo", "ring", "-b", "64K", "-e", "64K", "-n", "1000000",
		"--timeout", timeout.String())
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The ranks' lines as they come, and all of them for the failures.
	stderr, errLines := &lockedBuffer{}, make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			fmt.Fprintln(stderr, sc.Text())
			errLines <- sc.Text()
		}
		close(errLines)
	}()
	// Wait for the column header (not the run header before it): the
	// ranks are connected and running.
	_, victimPid, victim := pickWorker(t, cmd, stdout, stderr, np, func(line string) bool {
		return strings.Contains(line, "size") && strings.Contains(line, "count")
	})
	stopped := time.Now()
	if err := syscall.Kill(victimPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(victimPid, syscall.SIGKILL)
	// Every other rank reports within the timeout, twice the probe window
	// (once more on a rank told by a peer's abort notice) and some slack.
	lines := make(map[int]string)
	late := time.NewTimer(timeout + 2*collkit.ProbeWindow + 5*time.Second)
	defer late.Stop()
	for len(lines) < np-1 {
		select {
		case l, ok := <-errLines:
			var r int
			if _, err := fmt.Sscanf(l, "collbench: rank %d: ", &r); err == nil && r != victim && lines[r] == "" {
				lines[r] = l
				t.Logf("rank %d reported %v after the stop", r, time.Since(stopped).Round(time.Millisecond))
			}
			if ok {
				continue
			}
		case <-late.C:
		}
		t.Fatalf("%d of %d ranks reported within %v of the stop; stderr:\n%s", len(lines), np-1, time.Since(stopped), stderr.String())
	}
	go func() {
		for range errLines {
		}
	}()
	for r, line := range lines {
		if !strings.Contains(line, fmt.Sprintf("stall report: rank %d is not responding", victim)) {
			t.Errorf("rank %d's stall report does not name the stopped rank %d first: %s", r, victim, line)
		}
		for x := range np {
			if x != victim && (strings.Contains(line, fmt.Sprintf("rank %d is not responding", x)) ||
				strings.Contains(line, fmt.Sprintf("rank %d is alive but", x))) {
				t.Errorf("rank %d names the live rank %d as stuck: %s", r, x, line)
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2*timeout + 30*time.Second):
		t.Fatalf("collbench still running %v after rank %d was stopped; stderr:\n%s", time.Since(stopped), victim, stderr.String())
	}
	if err == nil {
		t.Fatal("collbench exited 0 after a rank was stopped")
	}
	t.Logf("rank %d stopped; collbench exited (%v) %v later", victim, err, time.Since(stopped).Round(time.Millisecond))
}

// pickWorker reads the launcher's stdout until ready says a line shows the
// ranks running (the rest is discarded), and returns its np workers' pids
// and the pid and rank of one of them, chosen at random.
func pickWorker(t *testing.T, cmd *exec.Cmd, stdout io.Reader, stderr fmt.Stringer, np int, ready func(line string) bool) (workers []int, pid, rank int) {
	t.Helper()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !ready(sc.Text()) {
	}
	go io.Copy(io.Discard, stdout)
	workers = children(cmd.Process.Pid)
	if len(workers) != np {
		t.Fatalf("found %d workers, want %d; stderr:\n%s", len(workers), np, stderr.String())
	}
	pid = workers[time.Now().Nanosecond()%len(workers)]
	return workers, pid, rankOf(pid)
}
