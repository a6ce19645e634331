// Command elastic is an elastic training loop: a rank dies mid-loop, the
// survivors shrink their communicator and go on from the same step with
// exact results, a replacement joins and the world grows back.
//
//	go run ./examples/elastic -np 4
//
// It launches -np processes (the launch package hosts the store, so that
// the job outlives any of them). The "model" is a vector that each step
// updates with the all-reduced gradients of every rank. At step -kill-step
// the process of rank -kill kills itself with SIGKILL, as a crash would;
// the others' all-reduce fails, they Shrink, agree on the step to resume
// from (an all-reduce Min: the failed step may have finished on some ranks
// and not on others, which roll it back) and go on. The launcher sees the
// process die and starts a replacement, which calls collkit.Join; the
// members see it waiting (JoinersWaiting, every step), Grow, and send it
// the model. At -regrow-step the members wait for it if it has not come
// yet, so that the run, and its output, is the same every time.
//
// At the end every rank checks that all hold the same model, and the
// ranks that were there from the start recompute the model serially from
// the membership of every step: it must match bit for bit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/launch"
)

func main() {
	np := flag.Int("np", 4, "processes to launch")
	steps := flag.Int("steps", 30, "training steps")
	dim := flag.Int("dim", 1000, "model parameters")
	kill := flag.Int("kill", 1, "rank whose process kills itself")
	killStep := flag.Int("kill-step", 10, "the step at which it does")
	regrowStep := flag.Int("regrow-step", 20, "from this step the members wait (up to -wait) for the replacement if it has not joined yet")
	wait := flag.Duration("wait", 30*time.Second, "the longest any step of the recovery may take")
	flag.Parse()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	cfg := config{steps: *steps, dim: *dim, np: *np, kill: *kill, killStep: *killStep, regrowStep: *regrowStep, wait: *wait}
	env, joiner, err := launch.JoinEnv(os.Getenv)
	if err == nil && !joiner {
		env, err = bootstrap.FromEnv(os.Getenv)
		if errors.Is(err, bootstrap.ErrNoEnv) {
			if err := launcher(*np, *wait); err != nil {
				log.Fatal(err)
			}
			return
		}
	}
	if err == nil {
		err = train(ctx, cfg, env, joiner)
	}
	if err != nil {
		log.Fatalf("pid %d: %v", os.Getpid(), err)
	}
}

// launcher starts np processes and, when one dies, a replacement; it
// returns when the rest have finished.
func launcher(np int, wait time.Duration) error {
	job, err := launch.Start(launch.Config{N: np, Args: os.Args[1:]})
	if err != nil {
		return err
	}
	defer job.Close()
	procs := job.Procs()
	replaced := false
	deadline := time.After(10 * wait)
	seen := map[int]bool{}
	for {
		finished := 0
		for _, p := range procs {
			select {
			case <-p.Done():
			default:
				continue
			}
			finished++
			if p.Err() == nil || seen[p.Index] {
				continue
			}
			seen[p.Index] = true
			if replaced || p.Rank < 0 {
				return fmt.Errorf("process %d (pid %d) failed: %v", p.Index, p.Pid(), p.Err())
			}
			replaced = true
			fmt.Printf("launcher: process %d (pid %d) died (%v); starting a replacement\n", p.Index, p.Pid(), p.Err())
			r, err := job.Spawn()
			if err != nil {
				return err
			}
			procs = append(procs, r)
		}
		if finished == len(procs) {
			return nil
		}
		select {
		case <-job.Exited():
		case <-deadline:
			return fmt.Errorf("the processes did not finish within %v", 10*wait)
		}
	}
}

type config struct {
	steps, dim, np, kill, killStep, regrowStep int
	wait                                       time.Duration
}

// grad is process id's gradient of parameter j at step s: small integers,
// so that every sum is exact in float64 whatever the order.
func grad(id, s, j int, w float64) float64 {
	return math.Mod(math.Abs(math.Floor(w))*3+float64((id+1)*(j+1)+s), 97)
}

// lr is a power of two, so that the update is exact too.
const lr = 1.0 / 8

// trainer is one process's state.
type trainer struct {
	cfg     config
	c       *collkit.Comm
	w, prev []float64 // the model, and before the last step
	g       []float64
	step    int           // the next step to run
	history map[int][]int // the members of every step applied; nil in a joiner
}

func train(ctx context.Context, cfg config, env bootstrap.Env, joiner bool) error {
	opts := collkit.Options{ElasticWait: 5 * time.Second, Timeout: cfg.wait}
	setup, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	t := &trainer{cfg: cfg, w: make([]float64, cfg.dim), prev: make([]float64, cfg.dim), g: make([]float64, cfg.dim)}
	var err error
	if joiner {
		if t.c, err = collkit.Join(setup, env, opts); err == nil {
			err = t.sync(setup) // the members send the model and the step
		}
	} else {
		t.history = map[int][]int{}
		t.c, err = collkit.Connect(setup, env, opts)
	}
	if err != nil {
		return err
	}
	defer func() { t.c.Close() }()
	for t.step < cfg.steps {
		if !joiner && t.c.ID() == cfg.kill && t.step == cfg.killStep {
			syscall.Kill(os.Getpid(), syscall.SIGKILL) // a crash: no goodbye to anyone
		}
		grew, err := t.maybeGrow(ctx)
		if grew {
			continue // the new generation starts the step over, as the joiner does
		}
		if err == nil {
			err = t.apply(ctx)
		}
		if err != nil {
			if err := t.recover(ctx, err); err != nil {
				return err
			}
		}
	}
	return t.check(ctx)
}

// say prints a line from rank 0 of the current communicator.
func (t *trainer) say(format string, args ...any) {
	if t.c.Rank() == 0 {
		fmt.Printf(format+"\n", args...)
	}
}

// maybeGrow admits the processes waiting to join, if any. At
// cfg.regrowStep, while the world is smaller than at the start, it waits
// for one. It reports whether the communicator grew.
func (t *trainer) maybeGrow(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(t.cfg.wait)
	for {
		n, err := t.c.JoinersWaiting(ctx)
		if err != nil {
			return false, err
		}
		if n > 0 {
			break
		}
		if t.step != t.cfg.regrowStep || t.c.Size() >= t.cfg.np {
			return false, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("step %d: no replacement came to join within %v", t.step, t.cfg.wait)
		}
	}
	gctx, cancel := context.WithTimeout(ctx, t.cfg.wait)
	defer cancel()
	nc, err := t.c.Grow(gctx)
	if err != nil {
		return false, err // t.c is as it was: recover shrinks it
	}
	t.c = nc
	if err := t.sync(gctx); err != nil {
		return false, err
	}
	t.say("step %d: a replacement joined; now %d ranks %v; sent it the model", t.step, t.c.Size(), t.c.Members())
	return true, nil
}

// sync sends rank 0's step and model to every rank (the joiner's first
// collective, the members' first after Grow).
func (t *trainer) sync(ctx context.Context) error {
	buf := append([]float64{float64(t.step)}, t.w...)
	if err := collkit.Broadcast(ctx, t.c, buf, 0); err != nil {
		return err
	}
	t.step = int(buf[0])
	copy(t.w, buf[1:])
	return nil
}

// apply runs one step: every rank's gradient, all-reduced, updates the
// model.
func (t *trainer) apply(ctx context.Context) error {
	id := t.c.ID()
	for j, w := range t.w {
		t.g[j] = grad(id, t.step, j, w)
	}
	if err := collkit.AllReduce(ctx, t.c, t.g, t.g, collkit.Sum); err != nil {
		return err
	}
	copy(t.prev, t.w)
	for j := range t.w {
		t.w[j] -= lr * t.g[j]
	}
	if t.history != nil {
		t.history[t.step] = t.c.Members()
	}
	t.step++
	return nil
}

// recover shrinks the communicator after a failed collective and goes on
// from the first step that some survivor has not finished, rolling back
// the step this process applied if the others did not.
func (t *trainer) recover(ctx context.Context, cause error) error {
	sctx, cancel := context.WithTimeout(ctx, t.cfg.wait)
	defer cancel()
	for {
		nc, err := t.c.Shrink(sctx)
		if err != nil {
			return fmt.Errorf("step %d: shrinking after %v: %w", t.step, cause, err)
		}
		t.c = nc
		at := []int64{int64(t.step)}
		if err := collkit.AllReduce(sctx, t.c, at, at, collkit.Min); err != nil {
			continue // another failure: shrink again
		}
		if resume := int(at[0]); resume < t.step {
			copy(t.w, t.prev) // this process finished the step the others did not: undo it
			delete(t.history, resume)
			t.step = resume
		}
		t.say("step %d: an all-reduce failed; shrank to %d ranks %v, resuming from step %d", t.step, t.c.Size(), t.c.Members(), t.step)
		return nil
	}
}

// check makes sure every rank holds the same model and, on the ranks that
// saw every step, that it is the serial recomputation's.
func (t *trainer) check(ctx context.Context) error {
	lo, hi := slices.Clone(t.w), slices.Clone(t.w)
	if err := collkit.AllReduce(ctx, t.c, lo, lo, collkit.Min); err != nil {
		return err
	}
	if err := collkit.AllReduce(ctx, t.c, hi, hi, collkit.Max); err != nil {
		return err
	}
	for j := range t.w {
		if lo[j] != t.w[j] || hi[j] != t.w[j] {
			return fmt.Errorf("process %d: parameter %d is %v here but the ranks hold values from %v to %v", t.c.ID(), j, t.w[j], lo[j], hi[j])
		}
	}
	if t.history != nil {
		serial := make([]float64, t.cfg.dim)
		for s := range t.cfg.steps {
			for j, w := range serial {
				var sum float64
				for _, m := range t.history[s] {
					sum += grad(m, s, j, w)
				}
				serial[j] -= lr * sum
			}
		}
		for j := range serial {
			if serial[j] != t.w[j] {
				return fmt.Errorf("process %d: parameter %d is %v, the serial recomputation %v", t.c.ID(), j, t.w[j], serial[j])
			}
		}
	}
	t.say("done: %d steps on %d ranks %v; every rank holds the same model, and it matches the serial recomputation exactly (w[0]=%v, w[%d]=%v)",
		t.cfg.steps, t.c.Size(), t.c.Members(), t.w[0], t.cfg.dim-1, t.w[t.cfg.dim-1])
	return nil
}
