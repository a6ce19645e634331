//go:build linux

package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The bound process is a child (this test binary run again), so that the
// binding cannot slow the other tests down.
func TestBindCore(t *testing.T) {
	if os.Getenv("COLLKIT_BIND_CHILD") != "" {
		bindChild()
		return
	}
	n := onlineCPUs()
	if n < 1 {
		t.Skip("cannot read /sys/devices/system/cpu/online")
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < n {
		t.Skip("this test already runs bound to fewer CPUs than the machine has")
	}
	for _, rank := range []int{0, 1, n, 2*n + 1} {
		out := runChild(t, strconv.Itoa(rank), nil)
		if want := fmt.Sprintf("cpu %d, every thread on it", rank%n); out != want {
			t.Errorf("local rank %d: child says %q, want %q", rank, out, want)
		}
	}
	// Bound by an outer launcher to one CPU: left alone.
	if n > 1 {
		var one unix.CPUSet
		one.Set(n - 1)
		if out := runChild(t, "0", &one); out != "cpu -1, every thread on it" {
			t.Errorf("already bound: child says %q, want it left on its CPU (cpu -1)", out)
		}
	}
}

// runChild runs TestBindCore as local rank rank, under mask when not nil,
// and returns its last output line.
func runChild(t *testing.T, rank string, mask *unix.CPUSet) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBindCore$", "-test.count=1")
	cmd.Env = append(os.Environ(), "COLLKIT_BIND_CHILD="+rank)
	var out []byte
	var err error
	if mask != nil {
		// A child inherits the affinity of the thread that starts it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // this thread ends with the goroutine
			if err = unix.SchedSetaffinity(0, mask); err == nil {
				out, err = cmd.CombinedOutput()
			}
		}()
		<-done
	} else {
		out, err = cmd.CombinedOutput()
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "cpu ") {
			return line
		}
	}
	t.Fatalf("child printed no result:\n%s", out)
	return ""
}

// bindChild binds, starts more threads, and prints where every thread may
// run.
func bindChild() {
	rank, _ := strconv.Atoi(os.Getenv("COLLKIT_BIND_CHILD"))
	cpu, err := BindCore(rank)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	var before unix.CPUSet
	unix.SchedGetaffinity(0, &before)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 4 { // threads started after the binding
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			wg.Done()
			<-release
		}()
	}
	wg.Wait()
	defer close(release)
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // exited
		}
		if set != before || (cpu >= 0 && (set.Count() != 1 || !set.IsSet(cpu))) {
			fmt.Printf("thread %d: %d CPUs, not CPU %d alone\n", tid, set.Count(), cpu)
			return
		}
	}
	fmt.Printf("cpu %d, every thread on it\n", cpu)
}
