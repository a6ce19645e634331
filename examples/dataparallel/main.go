// Command dataparallel is the communication pattern of data-parallel
// training: each rank computes the gradients of every layer, last layer
// first (the backward pass), and the ranks all-reduce them. Blocking, the
// all-reduces start after the backward pass; overlapped, each layer's
// all-reduce starts (AllReduceAsync) as soon as its gradient is computed and
// runs while the earlier layers are computed, as PyTorch DDP does with its
// gradient buckets. Every step's gradients are checked element by element.
//
// Under a launcher every process is one rank:
//
//	torchrun --nproc-per-node 2 ... (or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)
//	mpirun -np 2 dataparallel
//
// Started by hand it launches -np ranks of itself on this machine:
//
//	go run ./examples/dataparallel -np 2 -layers 16 -params 262144 -work 8
//
// Rank 0 prints the median step time of compute alone, communication alone,
// blocking and overlapped, each the slowest rank's, the modes taking turns
// step by step.
//
// With -offcpu each layer's backward pass also waits that long off the CPU,
// as a GPU kernel's time passes for the host thread that launched it. A
// machine with no spare cores (2 ranks on 2 vCPUs) cannot overlap CPU
// compute with communication, which needs the cores too; off-CPU compute
// shows what the overlap gains where the compute runs elsewhere:
//
//	go run ./examples/dataparallel -np 2 -work 1 -offcpu 2ms
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/launch"
)

func main() {
	np := flag.Int("np", 2, "ranks to launch when started without a launcher")
	layers := flag.Int("layers", 16, "layers, one gradient bucket each")
	params := flag.Int("params", 1<<18, "float32 parameters per layer")
	work := flag.Int("work", 8, "multiply-adds per parameter in the backward pass")
	steps := flag.Int("steps", 10, "measured steps per mode")
	offCPU := flag.Duration("offcpu", 0, "per layer, also wait this long off the CPU, as for a GPU kernel")
	flag.Parse()
	ctx := context.Background()

	if _, err := bootstrap.FromEnv(os.Getenv); errors.Is(err, bootstrap.ErrNoEnv) {
		if err := launch.Run(ctx, launch.Config{N: *np, Args: os.Args[1:]}); err != nil {
			log.Fatal(err)
		}
		return
	}
	comm, err := collkit.FromEnv(ctx, collkit.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	m := newModel(comm, *layers, *params, *work)
	m.offCPU = *offCPU
	modes := []struct {
		name  string
		step  func(context.Context) error
		check bool // the gradients are all-reduced: check them
	}{
		{"compute only", m.computeOnly, false},
		{"all-reduce only", m.communicateOnly, false},
		{"blocking", m.blocking, true},
		{"overlapped", m.overlapped, true},
	}
	// The modes take turns step by step, so that a noisy machine's drift
	// falls on all of them alike; the first round warms up.
	samples := make([][]time.Duration, len(modes))
	for s := range *steps + 1 {
		for i, mode := range modes {
			took, err := m.timeStep(ctx, mode.step, mode.check)
			if err != nil {
				log.Fatalf("rank %d: %s: %v", comm.Rank(), mode.name, err)
			}
			if s > 0 {
				samples[i] = append(samples[i], took)
			}
		}
	}
	times := make([]time.Duration, len(modes))
	for i, ts := range samples {
		slices.Sort(ts)
		times[i] = ts[len(ts)/2]
	}
	if comm.Rank() == 0 {
		fmt.Printf("# %d ranks, %d layers x %d float32 (%.1f MiB of gradients), %d multiply-adds per parameter, %v off the CPU per layer\n",
			comm.Size(), *layers, *params, float64(*layers**params*4)/(1<<20), *work, *offCPU)
		for i, mode := range modes {
			fmt.Printf("%-16s %8.2f ms/step\n", mode.name, float64(times[i].Microseconds())/1000)
		}
		fmt.Printf("overlap saves %.0f%% of the blocking step (the bound, max(compute, all-reduce), would save %.0f%%)\n",
			100*(1-float64(times[3])/float64(times[2])), 100*(1-float64(max(times[0], times[1]))/float64(times[2])))
	}
}

// model holds one gradient bucket per layer and the inputs the synthetic
// backward pass reads.
type model struct {
	comm  *collkit.Comm
	grads [][]float32
	input []float32
	work  int
	// offCPU is each layer's time off the CPU (a GPU kernel's, say).
	offCPU time.Duration
}

func newModel(comm *collkit.Comm, layers, params, work int) *model {
	m := &model{comm: comm, grads: make([][]float32, layers), input: make([]float32, params+work), work: work}
	for l := range m.grads {
		m.grads[l] = make([]float32, params)
	}
	for i := range m.input {
		m.input[i] = float32(i % 8)
	}
	return m
}

// backward computes layer l's gradient: work multiply-adds per parameter
// (after waiting offCPU),
// g[i] = (rank+1) * sum_j input[i+j]. Small integers, so every sum over
// ranks is exact in float32.
func (m *model) backward(l int) {
	if m.offCPU > 0 {
		time.Sleep(m.offCPU) // the host thread waits for the device
	}
	d := float32(m.comm.Rank() + 1)
	g := m.grads[l]
	for i := range g {
		var acc float32
		for _, x := range m.input[i : i+m.work] {
			acc += x * d
		}
		g[i] = acc
	}
}

// check verifies layer l's all-reduced gradient element by element.
func (m *model) check(l int) error {
	n := m.comm.Size()
	ranks := float32(n * (n + 1) / 2)
	for i, v := range m.grads[l] {
		var s float32
		for _, x := range m.input[i : i+m.work] {
			s += x
		}
		if v != ranks*s {
			return fmt.Errorf("layer %d element %d: %v, want %v", l, i, v, ranks*s)
		}
	}
	return nil
}

func (m *model) computeOnly(context.Context) error {
	for l := len(m.grads) - 1; l >= 0; l-- {
		m.backward(l)
	}
	return nil
}

func (m *model) communicateOnly(ctx context.Context) error {
	for l := len(m.grads) - 1; l >= 0; l-- {
		if err := collkit.AllReduce(ctx, m.comm, m.grads[l], m.grads[l], collkit.Sum); err != nil {
			return err
		}
	}
	return nil
}

// blocking all-reduces the gradients after the whole backward pass.
func (m *model) blocking(ctx context.Context) error {
	m.computeOnly(ctx)
	return m.communicateOnly(ctx)
}

// overlapped starts each layer's all-reduce as soon as its gradient is
// computed, and waits for all of them before the optimizer would step.
func (m *model) overlapped(ctx context.Context) error {
	works := make([]*collkit.Work, 0, len(m.grads))
	for l := len(m.grads) - 1; l >= 0; l-- {
		m.backward(l)
		works = append(works, collkit.AllReduceAsync(ctx, m.comm, m.grads[l], m.grads[l], collkit.Sum))
	}
	for _, w := range works {
		if err := w.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (m *model) checkAll() error {
	for l := range m.grads {
		if err := m.check(l); err != nil {
			return err
		}
	}
	return nil
}

// timeStep runs one step and returns the slowest rank's time. The check
// after the step is not timed.
func (m *model) timeStep(ctx context.Context, step func(context.Context) error, check bool) (time.Duration, error) {
	if err := m.comm.Barrier(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	err := step(ctx)
	took := []int64{int64(time.Since(start))}
	if err == nil && check {
		err = m.checkAll()
	}
	if err != nil {
		return 0, err
	}
	if err := collkit.AllReduce(ctx, m.comm, took, took, collkit.Max); err != nil {
		return 0, err
	}
	return time.Duration(took[0]), nil
}
