package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperVar makes this test binary act as a process of a job: it prints
// what it got and waits until it is killed or its stdin closes.
const helperVar = "LAUNCH_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperVar) == "1" {
		env, joiner, err := JoinEnv(os.Getenv)
		store := os.Getenv("MASTER_ADDR") + ":" + os.Getenv("MASTER_PORT")
		if joiner {
			store = env.StoreAddr()
		}
		fmt.Printf("rank=%q joiner=%v store=%s err=%v\n", os.Getenv("RANK"), joiner, store, err)
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		<-stop // until the test kills us
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A Job runs its ranks, starts a joiner without a rank, kills one process
// with SIGKILL (the others go on), and Close ends the rest.
func TestJobSpawnKill(t *testing.T) {
	lines := make(chan string, 8)
	job, err := Start(Config{N: 2, Command: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{helperVar + "=1"},
		Output: func(p int) (io.Writer, io.Writer) {
			r, w := io.Pipe()
			go func() {
				s := bufio.NewScanner(r)
				for s.Scan() {
					lines <- fmt.Sprintf("%d %s", p, s.Text())
				}
			}()
			return w, os.Stderr
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	joiner, err := job.Spawn()
	if err != nil {
		t.Fatal(err)
	}
	if joiner.Index != 2 || joiner.Rank != -1 {
		t.Errorf("the spawned process has index %d rank %d, want 2 and -1", joiner.Index, joiner.Rank)
	}
	got := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for range 3 {
		select {
		case l := <-lines:
			got[l] = true
		case <-timeout:
			t.Fatalf("waiting for the 3 processes to say what they got: only %v", got)
		}
	}
	store := job.StoreAddr()
	for _, want := range []string{
		fmt.Sprintf(`0 rank="0" joiner=false store=%s err=<nil>`, store),
		fmt.Sprintf(`1 rank="1" joiner=false store=%s err=<nil>`, store),
		fmt.Sprintf(`2 rank="" joiner=true store=%s err=<nil>`, store),
	} {
		if !got[want] {
			t.Errorf("no process printed %q; got %v", want, got)
		}
	}
	procs := job.Procs()
	if err := job.Kill(procs[1]); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := procs[1].Err(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the killed process exited with %v, want SIGKILL", err)
	}
	select {
	case <-procs[0].Done():
		t.Fatal("killing process 1 ended process 0 too")
	default:
	}
	job.Close()
	for _, p := range procs {
		if !strings.Contains(fmt.Sprint(p.Err()), "killed") {
			t.Errorf("process %d after Close: %v, want killed", p.Index, p.Err())
		}
	}
}
