package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Config describes a local launch. Zero values are documented per field.
type Config struct {
	// N is the number of ranks; it must be at least 1.
	N int
	// Command is the program every rank runs. Empty means this executable.
	Command string
	// Args are the program's arguments, the same for every rank.
	Args []string
	// Env is added to this process's environment for every rank.
	Env []string
	// Stdout and Stderr receive the ranks' output. Nil means os.Stdout and
	// os.Stderr.
	Stdout, Stderr io.Writer
	// Grace is how long the other ranks get to exit on their own after one
	// rank failed, before they are killed. Zero means 10 s.
	Grace time.Duration
	// Output, when set, gives process p (see Proc.Index) its own standard
	// output and error, as a launcher that reads what each one says needs;
	// a nil writer means Stdout or Stderr.
	Output func(p int) (stdout, stderr io.Writer)
	// Store is the URL of a store outside the job through which the ranks
	// meet (COLLKIT_STORE, such as etcd://10.0.0.5:2379/myjob); the
	// launcher then hosts none, and the job's keys outlive it. Empty means
	// the launcher hosts the TCP store, and the ranks use it even when
	// COLLKIT_STORE is set in this process's environment.
	Store string
}

// RankError reports ranks that exited unsuccessfully.
type RankError struct {
	Failed map[int]error // rank -> why its process failed
}

func (e *RankError) Error() string {
	ranks := slices.Sorted(maps.Keys(e.Failed))
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprintf("rank %d: %v", r, e.Failed[r])
	}
	return "launch: " + strings.Join(parts, "; ")
}

// ExitCode is the exit status the launcher should end with: the first failed
// rank's own status when it has one, else 1.
func (e *RankError) ExitCode() int {
	ranks := slices.Sorted(maps.Keys(e.Failed))
	for _, r := range ranks {
		var ee *exec.ExitError
		if errors.As(e.Failed[r], &ee) && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
	}
	return 1
}

// Run starts cfg.N ranks and waits for all of them. It returns nil when every
// rank exits with status 0, and a *RankError otherwise.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Grace == 0 {
		cfg.Grace = 10 * time.Second
	}
	job, err := Start(cfg)
	if err != nil {
		return err
	}
	defer job.Close()
	procs := job.Procs()
	failed := map[int]error{}
	var deadline <-chan time.Time
	exited := make([]bool, len(procs))
	for left := len(procs); left > 0; {
		select {
		case <-job.Exited():
			for _, p := range procs {
				select {
				case <-p.Done():
				default:
					continue
				}
				if exited[p.Index] {
					continue
				}
				exited[p.Index] = true
				left--
				if p.err != nil {
					failed[p.Rank] = p.err
					if deadline == nil {
						deadline = time.After(cfg.Grace)
					}
				}
			}
		case <-deadline:
			for _, p := range procs {
				_ = job.Kill(p)
			}
			deadline = nil
		case <-ctx.Done():
			for _, p := range procs {
				_ = job.Signal(p, syscall.SIGTERM)
			}
			if deadline == nil {
				deadline = time.After(cfg.Grace)
			}
			ctx = context.Background() // stop selecting on it
		}
	}
	if len(failed) > 0 {
		return &RankError{Failed: failed}
	}
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func splitHostPort(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return strings.Trim(addr[:i], "[]"), addr[i+1:]
}

func newJobID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "local-" + hex.EncodeToString(b)
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WithoutLauncherEnv returns environ without the variables a launcher or
// collkit sets (rank and size, the store address, OMPI_*, PMI*, SLURM_*,
// COLLKIT_*), so that a program started with it, as by a test running under
// mpirun or srun, launches its own ranks rather than joining that job.
func WithoutLauncherEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "RANK", name == "WORLD_SIZE", name == "LOCAL_RANK", name == "LOCAL_WORLD_SIZE",
			name == "MASTER_ADDR", name == "MASTER_PORT",
			strings.HasPrefix(name, "OMPI_"), strings.HasPrefix(name, "PMI"), strings.HasPrefix(name, "SLURM_"),
			strings.HasPrefix(name, "COLLKIT_"):
			continue
		}
		env = append(env, kv)
	}
	return env
}
