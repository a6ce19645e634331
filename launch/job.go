package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/collkit/collkit/bootstrap"
)

// JoinVar is set to 1 in the environment of a process that Job.Spawn
// starts: it is not a rank of the job's first generation but a process
// that enters the running job (collkit.Join). It gets no RANK or
// WORLD_SIZE, so that it cannot register as a rank by mistake; JoinEnv
// reads the rest of what it needs.
const JoinVar = "COLLKIT_JOIN"

// Job is a launch in progress (see Start): its processes run, and it can
// start more of them (Spawn) and kill one (Kill), as an elastic job's
// chaos test does. Its store lives until Close, whatever happens to the
// processes.
type Job struct {
	cfg   Config
	srv   *bootstrap.Server
	store []string // what every process gets: the store's address, the job id, the secret

	mu      sync.Mutex
	procs   []*Proc
	closed  bool
	changed chan struct{} // a process exited (capacity 1: a hint to look)
}

// Proc is one process of a Job.
type Proc struct {
	Index   int       // in the order started: the ranks 0..N-1, then spawned processes
	Rank    int       // its rank in generation 0, or -1 for a spawned process
	Started time.Time // when it was started
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // why it exited, once done is closed
}

// Pid is the process's operating-system id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is why the process exited (nil for status 0); valid once Done is
// closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Start hosts the job's store and starts cfg.N ranks; it does not wait for
// them. Close the Job when done with it: that kills what is left and
// stops the store.
func Start(cfg Config) (*Job, error) {
	if cfg.N < 1 {
		return nil, fmt.Errorf("launch: %d ranks requested: the number of ranks must be at least 1", cfg.N)
	}
	if cfg.Command == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("launch: finding this program to start its ranks: %w", err)
		}
		cfg.Command = exe
	}
	cfg.Stdout = orDefault(cfg.Stdout, io.Writer(os.Stdout))
	cfg.Stderr = orDefault(cfg.Stderr, io.Writer(os.Stderr))
	// A fresh secret per job: only the processes started here can reach
	// the store or join the ranks' mesh.
	secret := newSecret()
	j := &Job{cfg: cfg, changed: make(chan struct{}, 1), store: []string{
		"COLLKIT_STORE=" + cfg.Store, "COLLKIT_JOB_ID=" + newJobID(), "COLLKIT_SECRET=" + secret}}
	if cfg.Store == "" {
		srv, err := bootstrap.ListenConfig(bootstrap.ServerConfig{Addr: "127.0.0.1:0", Secret: []byte(secret)})
		if err != nil {
			return nil, fmt.Errorf("launch: starting the bootstrap store: %w", err)
		}
		host, port := splitHostPort(srv.Addr())
		j.srv = srv
		j.store = append(j.store, "MASTER_ADDR="+host, "MASTER_PORT="+port, "COLLKIT_STORE_EXTERNAL=1")
	} else if _, err := bootstrap.ParseStoreURL(cfg.Store); err != nil {
		return nil, fmt.Errorf("launch: store %q: %w", cfg.Store, err)
	}
	for r := range cfg.N {
		if _, err := j.start(r, []string{
			"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(cfg.N),
			"LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=" + strconv.Itoa(cfg.N)}); err != nil {
			j.Close()
			return nil, fmt.Errorf("launch: starting rank %d (%s): %w", r, cfg.Command, err)
		}
	}
	return j, nil
}

// Spawn starts one more process of the job, with the same command and
// arguments, the job's store variables, JoinVar=1 and env, but no rank:
// it is to enter the running job with collkit.Join.
func (j *Job) Spawn(env ...string) (*Proc, error) {
	p, err := j.start(-1, append([]string{JoinVar + "=1"}, env...))
	if err != nil {
		return nil, fmt.Errorf("launch: starting a process to join the job (%s): %w", j.cfg.Command, err)
	}
	return p, nil
}

func (j *Job) start(rank int, vars []string) (*Proc, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, errors.New("the job is closed")
	}
	p := &Proc{Index: len(j.procs), Rank: rank, done: make(chan struct{})}
	cmd := exec.Command(j.cfg.Command, j.cfg.Args...)
	cmd.Stdout, cmd.Stderr = j.cfg.Stdout, j.cfg.Stderr
	if j.cfg.Output != nil {
		out, errw := j.cfg.Output(p.Index)
		cmd.Stdout, cmd.Stderr = orDefault(out, cmd.Stdout), orDefault(errw, cmd.Stderr)
	}
	cmd.Env = append(os.Environ(), j.cfg.Env...)
	cmd.Env = append(cmd.Env, j.store...)
	cmd.Env = append(cmd.Env, vars...)
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.Started = time.Now()
	j.procs = append(j.procs, p)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		select {
		case j.changed <- struct{}{}:
		default:
		}
	}()
	return p, nil
}

// Procs lists every process started so far, exited ones too, in order.
func (j *Job) Procs() []*Proc {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*Proc(nil), j.procs...)
}

// Exited receives a value after a process exits (several exits may share
// one): look at the processes' Done to see which.
func (j *Job) Exited() <-chan struct{} { return j.changed }

// Kill kills process p with SIGKILL, as `kill -9` does: it gets no chance
// to close its connections or say goodbye.
func (j *Job) Kill(p *Proc) error {
	return j.Signal(p, syscall.SIGKILL)
}

// Signal sends sig to process p; one that already exited is no error.
func (j *Job) Signal(p *Proc, sig os.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("launch: signalling process %d (pid %d): %w", p.Index, p.Pid(), err)
	}
	return nil
}

// StoreAddr is the address of the store the launcher hosts, or
// Config.Store's URL when the job meets in an external store.
func (j *Job) StoreAddr() string {
	if j.srv == nil {
		return j.cfg.Store
	}
	return j.srv.Addr()
}

// Close kills the processes still running with SIGKILL, waits for them to
// exit, and stops the store. Safe to call more than once.
func (j *Job) Close() {
	j.mu.Lock()
	j.closed = true
	procs := append([]*Proc(nil), j.procs...)
	j.mu.Unlock()
	for _, p := range procs {
		_ = j.Kill(p)
	}
	for _, p := range procs {
		<-p.done
	}
	if j.srv != nil {
		j.srv.Close()
	}
}

// JoinEnv reads what a process that Job.Spawn started needs to join the
// job (the store's address, the job id and secret) from the environment:
// pass os.Getenv. ok is false when the process was not started to join
// (JoinVar is not set).
func JoinEnv(getenv func(string) string) (env bootstrap.Env, ok bool, err error) {
	if getenv(JoinVar) != "1" {
		return bootstrap.Env{}, false, nil
	}
	// bootstrap.FromEnv wants a rank; the joiner has none, and Join uses
	// neither Rank nor Size.
	env, err = bootstrap.FromEnv(func(name string) string {
		switch name {
		case "RANK":
			return "0"
		case "WORLD_SIZE":
			return "1"
		case "LOCAL_RANK", "LOCAL_WORLD_SIZE":
			return ""
		}
		return getenv(name)
	})
	if err != nil {
		return bootstrap.Env{}, true, fmt.Errorf("launch: process started to join the job (%s=1): %w", JoinVar, err)
	}
	env.Rank, env.Size = -1, 0
	return env, true, nil
}
