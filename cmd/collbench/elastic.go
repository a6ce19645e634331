package main

// collbench elastic: a verified all-reduce loop over an elastic
// communicator while the launcher kills a random process with SIGKILL every
// --kill-every and, with --regrow, starts a replacement that joins. The
// launcher side (elasticLaunch) starts the processes through the launch
// package, which hosts the store so that it outlives every rank; the
// process side (elasticProcess) runs the loop and prints one line per
// event it took part in (recordPrefix and a JSON elasticRecord), which the
// launcher reads from its standard output.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/launch"
)

// elasticOptions are the elastic subcommand's flags.
type elasticOptions struct {
	np          int
	events      int
	killEvery   time.Duration
	regrow      bool
	size        int64 // bytes per all-reduce, a multiple of 8 (int64 elements)
	algo        string
	transport   string
	seed        uint64
	jsonPath    string
	store       string        // --store: COLLKIT_STORE for the processes
	deadline    time.Duration // a survivor not recovered by then hangs
	timeout     time.Duration // collkit.Options.Timeout
	elasticWait time.Duration // collkit.Options.ElasticWait
	spinWait    time.Duration // --spin-wait, as collbench's (autoSpin, or a duration; 0 disables)
	quiet       bool
}

func parseElasticFlags(args []string, stderr io.Writer) (elasticOptions, error) {
	fs := pflag.NewFlagSet("collbench elastic", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	var o elasticOptions
	var size string
	fs.IntVar(&o.np, "np", 8, "processes to launch (the first generation's ranks)")
	fs.IntVar(&o.events, "events", 3, "kills to make; without --regrow at most --np minus 1")
	fs.DurationVar(&o.killEvery, "kill-every", time.Second, "kill a random live process (rank 0 too) with SIGKILL this often; the next kill waits for the last event's recovery")
	fs.BoolVar(&o.regrow, "regrow", false, "after each kill start a replacement that joins (collkit.Join); the members admit it with Grow")
	fs.StringVar(&size, "size", "64K", "bytes per verified all-reduce of int64 (K/M suffixes)")
	fs.StringVar(&o.algo, "algo", "ring", "all-reduce algorithm")
	fs.StringVar(&o.transport, "transport", "tcp", "transport: tcp or shm")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the choice of victims")
	fs.StringVarP(&o.jsonPath, "json", "J", "", "write the per-event records as JSON to this file")
	fs.StringVar(&o.store, "store", "", "meet in this external store (COLLKIT_STORE, such as etcd://127.0.0.1:2379/chaos) instead of the one the launcher hosts")
	fs.DurationVar(&o.deadline, "deadline", 30*time.Second, "a survivor that has not recovered (or a replacement that has not joined) this long after the event hangs: the run fails")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "collective timeout (collkit.Options.Timeout): how long a rank waits for a peer that neither answers nor is seen dead")
	fs.DurationVar(&o.elasticWait, "elastic-wait", 5*time.Second, "collkit.Options.ElasticWait: how long a shrink waits for a member that no one saw die")
	o.spinWait = autoSpin
	fs.Var(spinFlag{&o.spinWait}, "spin-wait", "how long a TCP receive polls before sleeping: auto or a duration (0 disables; with more processes than cores polling takes the cores the others need)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print the summary only, not a line per event")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: collbench elastic [--np 8] [--events 100] [--kill-every 1s] [--regrow] [--size 64K] [--algo ring] [--transport tcp|shm] [--seed N] [--json FILE]\n\n"+
			"Runs a verified all-reduce loop over an elastic communicator while killing a random process with SIGKILL every --kill-every;\n"+
			"the survivors shrink (collkit.Comm.Shrink), agree on the step to resume from, and go on; with --regrow a replacement joins and the world grows back.\n"+
			"Prints per event the detection, shrink and grow times and the world size, and a summary; exits 1 on any hang, wrong element or disagreement.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("elastic: %v (see collbench elastic --help)", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("elastic: unexpected argument %q (see collbench elastic --help)", fs.Arg(0))
	}
	var err error
	if o.size, err = parseSize("--size", size, 8); err != nil {
		return o, fmt.Errorf("elastic: %w", err)
	}
	switch {
	case o.np < 2:
		return o, fmt.Errorf("elastic: --np %d: at least 2 processes, so that one survives a kill", o.np)
	case o.events < 0:
		return o, fmt.Errorf("elastic: --events %d: want 0 or more", o.events)
	case !o.regrow && o.events > o.np-1:
		return o, fmt.Errorf("elastic: --events %d without --regrow would kill every process of --np %d; use at most %d, or --regrow", o.events, o.np, o.np-1)
	case o.killEvery <= 0 || o.deadline <= 0 || o.timeout <= 0 || o.elasticWait <= 0:
		return o, errors.New("elastic: --kill-every, --deadline, --timeout and --elastic-wait must be positive durations")
	case o.transport != "tcp" && o.transport != "shm":
		return o, fmt.Errorf("elastic: --transport %q: want tcp or shm", o.transport)
	}
	if err := collkit.TransportAvailable(o.transport); err != nil {
		return o, fmt.Errorf("elastic: --transport %s: %w", o.transport, err)
	}
	return o, nil
}

// runElastic is the elastic subcommand, in the launcher or in one of its
// processes.
func runElastic(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseElasticFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	joinEnv, joiner, jerr := launch.JoinEnv(os.Getenv)
	env, envErr := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		if !joiner && (envErr != nil || env.Rank == 0) {
			fmt.Fprintf(stderr, "collbench: %v\n", err)
		}
		return exitUsage
	}
	switch {
	case joiner && jerr != nil:
		fmt.Fprintf(stderr, "collbench: %v\n", jerr)
		return exitUsage
	case joiner:
		env = joinEnv
	case errors.Is(envErr, bootstrap.ErrNoEnv):
		return elasticLaunch(ctx, o, args, stdout, stderr)
	case envErr != nil:
		fmt.Fprintf(stderr, "collbench: %v\n", envErr)
		return exitUsage
	}
	if err := elasticProcess(ctx, o, env, joiner, stdout); err != nil {
		who := fmt.Sprintf("rank %d", env.Rank)
		if joiner {
			who = "joining process"
		}
		fmt.Fprintf(stderr, "collbench: elastic: %s (pid %d): %v\n", who, os.Getpid(), err)
		return exitFailed
	}
	return 0
}

// corruptVar names a process (by id) whose result of step 3 gets one
// element wrong before the check, so that a test can see the check fail
// the run.
const corruptVar = "COLLBENCH_ELASTIC_CORRUPT"

// recordPrefix begins every line a process prints for the launcher.
const recordPrefix = "collbench-elastic "

// elasticRecord is what a process tells the launcher: its state after an
// event it took part in. Times are Unix nanoseconds, comparable between
// the processes of one machine.
type elasticRecord struct {
	// Kind: ready (connected, generation 0), joined (a replacement, in
	// the grown communicator), grow (a member, in the grown
	// communicator), shrink (recovered from a failure), wrong (a wrong
	// element: the run fails), fail (could not go on), done (stopped).
	Kind     string `json:"kind"`
	PID      int    `json:"pid"`
	ID       int    `json:"id"` // its process id (Comm.ID)
	Gen      int    `json:"gen"`
	Members  []int  `json:"members,omitempty"`
	Step     int    `json:"step"`               // the step it goes on from
	Start    int64  `json:"start_ns,omitempty"` // shrink: its collective failed; grow: Grow called
	Ready    int64  `json:"ready_ns,omitempty"` // in the new communicator (shrink: and the resume step agreed)
	Shrinks  int    `json:"shrinks,omitempty"`  // Shrink calls this recovery took
	Verified int64  `json:"verified"`           // all-reduces it verified so far
	Wrong    int64  `json:"wrong,omitempty"`    // wrong elements
	Err      string `json:"err,omitempty"`

	proc int // launcher: the process that said it (launch.Proc.Index)
	seq  int // launcher: the order it arrived in
}

// elasticInput is process id's element i at step: distinct per process,
// step and element, so that a missing, doubled, stale or misplaced
// contribution shows.
func elasticInput(id, step, i int) int64 {
	return int64(id+1)*1_000_003 + int64(step)*7_919 + int64(i)*int64(id%13+1)
}

// emitter prints records on the process's standard output.
type emitter struct {
	w   io.Writer
	pid int
}

func (e emitter) emit(r elasticRecord) {
	r.PID = e.pid
	b, _ := json.Marshal(r)
	e.w.Write(append([]byte(recordPrefix), append(b, '\n')...)) // one write: lines of processes do not mix
}

// elasticProcess is one process of the job: it connects (or joins), then
// runs verified all-reduces until ctx ends (the launcher's SIGTERM),
// shrinking after every failure and growing whenever processes wait to
// join.
func elasticProcess(ctx context.Context, o elasticOptions, env bootstrap.Env, joiner bool, stdout io.Writer) (err error) {
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()/o.np)) // as shareCores: the cores shared by the job's processes
	log, err := collkit.LoggerFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	em := emitter{w: stdout, pid: os.Getpid()}
	opts := collkit.Options{Transport: o.transport, Algorithm: o.algo, Timeout: o.timeout, ElasticWait: o.elasticWait, Logger: log,
		SpinWait: spinWait(o.spinWait)}
	setup, cancel := context.WithTimeoutCause(ctx, o.deadline, fmt.Errorf("--deadline %v passed while connecting", o.deadline))
	var c *collkit.Comm
	kind := "ready"
	if joiner {
		kind = "joined"
		c, err = collkit.Join(setup, env, opts)
	} else {
		c, err = collkit.Connect(setup, env, opts)
	}
	step := 0
	if err == nil && joiner {
		// The members are at some step: take theirs (see grown).
		step, err = agreeStep(setup, c, 0, collkit.Max)
	}
	cancel()
	if err != nil {
		em.emit(elasticRecord{Kind: "fail", ID: -1, Err: err.Error()})
		return err
	}
	defer func() { c.Close() }()
	em.emit(elasticRecord{Kind: kind, ID: c.ID(), Gen: c.Generation(), Members: c.Members(), Step: step, Ready: time.Now().UnixNano()})

	buf := make([]int64, o.size/8)
	var verified int64
	corrupt := -1
	if v := os.Getenv(corruptVar); v != "" {
		if corrupt, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("%s=%q: want a process id", corruptVar, v)
		}
	}
	for {
		if ctx.Err() != nil {
			em.emit(elasticRecord{Kind: "done", ID: c.ID(), Gen: c.Generation(), Members: c.Members(), Step: step, Verified: verified})
			return nil
		}
		var wrong int64
		var detail string
		err := func() error {
			if o.regrow {
				n, err := c.JoinersWaiting(ctx)
				if err != nil {
					return err
				}
				if n > 0 {
					start := time.Now()
					gctx, cancel := context.WithTimeoutCause(ctx, o.deadline, fmt.Errorf("--deadline %v passed while growing", o.deadline))
					nc, err := c.Grow(gctx)
					cancel()
					if err != nil {
						return err // c is as it was: shrink it
					}
					c = nc
					// The joiner's first collective is this one: it
					// learns the step (its own contribution is 0).
					if step, err = agreeStep(ctx, c, step, collkit.Max); err != nil {
						return err
					}
					em.emit(elasticRecord{Kind: "grow", ID: c.ID(), Gen: c.Generation(), Members: c.Members(), Step: step,
						Start: start.UnixNano(), Ready: time.Now().UnixNano(), Verified: verified})
					return errGrew
				}
			}
			id := c.ID()
			for i := range buf {
				buf[i] = elasticInput(id, step, i)
			}
			if err := collkit.AllReduce(ctx, c, buf, buf, collkit.Sum); err != nil {
				return err
			}
			if corrupt == id && step == 3 {
				buf[len(buf)/2]++ // the test of the check: this must fail the run
			}
			members := c.Members()
			for i, got := range buf {
				var want int64
				for _, m := range members {
					want += elasticInput(m, step, i)
				}
				if got != want {
					if wrong == 0 {
						detail = fmt.Sprintf("step %d, generation %d (members %v): element %d is %d, want %d", step, c.Generation(), members, i, got, want)
					}
					wrong++
				}
			}
			return nil
		}()
		if wrong > 0 {
			em.emit(elasticRecord{Kind: "wrong", ID: c.ID(), Gen: c.Generation(), Members: c.Members(), Step: step, Wrong: wrong, Err: detail, Verified: verified})
			return fmt.Errorf("%d wrong elements, the first at %s", wrong, detail)
		}
		if errors.Is(err, errGrew) {
			continue // every rank of the new generation starts the step over, the joiner too
		}
		if err == nil {
			verified++
			step++
			continue
		}
		if ctx.Err() != nil {
			continue // stopping: the loop's top says done
		}
		detected := time.Now()
		sctx, cancel := context.WithTimeoutCause(ctx, o.deadline, fmt.Errorf("--deadline %v passed while shrinking after %v", o.deadline, err))
		nc, resume, shrinks, serr := shrinkAndResume(sctx, c, step)
		cancel()
		c = nc // the latest communicator, closed at the end
		if serr != nil {
			if ctx.Err() != nil {
				continue
			}
			em.emit(elasticRecord{Kind: "fail", ID: c.ID(), Gen: c.Generation(), Members: c.Members(), Step: step, Err: serr.Error(), Verified: verified})
			return fmt.Errorf("after the failure of step %d (%v): %w", step, err, serr)
		}
		step = resume
		em.emit(elasticRecord{Kind: "shrink", ID: c.ID(), Gen: c.Generation(), Members: c.Members(), Step: step,
			Start: detected.UnixNano(), Ready: time.Now().UnixNano(), Shrinks: shrinks, Verified: verified, Err: err.Error()})
	}
}

// errGrew ends a step in which the communicator grew: the step starts
// over in the new generation, as the joiner's first does.
var errGrew = errors.New("grew")

// agreeStep returns the step that op (Min, Max) of every rank's step gives.
func agreeStep(ctx context.Context, c *collkit.Comm, step int, op collkit.Op) (int, error) {
	at := []int64{int64(step)}
	if err := collkit.AllReduce(ctx, c, at, at, op); err != nil {
		return step, err
	}
	return int(at[0]), nil
}

// shrinkAndResume shrinks c and agrees with the other survivors on the
// step to go on from: the first one that some survivor has not finished
// (the failed all-reduce may have finished on some ranks and not on
// others). A failure meanwhile shrinks again.
func shrinkAndResume(ctx context.Context, c *collkit.Comm, step int) (*collkit.Comm, int, int, error) {
	for shrinks := 1; ; shrinks++ {
		nc, err := c.Shrink(ctx)
		if err != nil {
			return c, step, shrinks, err
		}
		c = nc
		if at, err := agreeStep(ctx, c, step, collkit.Min); err == nil {
			return c, at, shrinks, nil
		}
	}
}
