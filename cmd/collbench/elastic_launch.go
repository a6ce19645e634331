package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/collkit/collkit/launch"
)

// elasticEvent is the launcher's account of one kill (and, with --regrow,
// the replacement's join): what --json writes, one per event.
type elasticEvent struct {
	Event      int   `json:"event"`
	VictimID   int   `json:"victim_id"` // its process id (Comm.ID)
	VictimPID  int   `json:"victim_pid"`
	KillUnixNS int64 `json:"kill_unix_ns"`
	Survivors  int   `json:"survivors"`
	// Detection: from the kill to the first survivor's failed collective,
	// and to the slowest survivor's.
	DetectFirstMS float64 `json:"detect_first_ms"`
	DetectLastMS  float64 `json:"detect_last_ms"`
	// Shrink: from a survivor's failed collective to its new communicator
	// being ready (Shrink, then the all-reduce Min on the resume step),
	// per survivor in the order of SurvivorIDs.
	SurvivorIDs    []int     `json:"survivor_ids"`
	ShrinkMS       []float64 `json:"shrink_ms"`
	ShrinkMedianMS float64   `json:"shrink_median_ms"`
	ShrinkMaxMS    float64   `json:"shrink_max_ms"`
	ShrinkRounds   int       `json:"shrink_rounds"` // the most Shrink calls one survivor needed
	Failures       []string  `json:"failures"`      // the error each survivor's collective failed with, in the order of SurvivorIDs
	ResumeStep     int       `json:"resume_step"`
	SizeAfterKill  int       `json:"size_after_kill"`
	// Grow (--regrow): from starting the replacement to its being in the
	// grown communicator; and the members' own Grow calls, the slowest.
	JoinerID         int     `json:"joiner_id,omitempty"`
	GrowMS           float64 `json:"grow_ms,omitempty"`
	GrowMembersMaxMS float64 `json:"grow_members_max_ms,omitempty"`
	SizeAfter        int     `json:"size_after"`
	Generation       int     `json:"generation"`
	Members          []int   `json:"members"`
	Hangs            int     `json:"hangs"`
	Disagreements    int     `json:"disagreements"`
	Error            string  `json:"error,omitempty"`
}

// elasticSummary is the whole run, as --json writes it.
type elasticSummary struct {
	NP        int            `json:"np"`
	Regrow    bool           `json:"regrow"`
	KillEvery string         `json:"kill_every"`
	Bytes     int64          `json:"bytes"`
	Algorithm string         `json:"algorithm"`
	Transport string         `json:"transport"`
	Seed      uint64         `json:"seed"`
	Events    []elasticEvent `json:"events"`
	Hangs     int            `json:"hangs"`
	Wrong     int64          `json:"wrong_elements"`
	Disagree  int            `json:"disagreements"`
	Verified  int64          `json:"verified_allreduces"` // by the processes that stopped cleanly at the end
	Error     string         `json:"error,omitempty"`
}

// collector gathers the records the processes print, and passes their
// other output on to stderr, each line named by its process.
type collector struct {
	mu      sync.Mutex
	recs    []elasticRecord
	notify  chan struct{} // capacity 1: a record came
	stderr  io.Writer
	errMu   sync.Mutex
	verbose bool
}

func (c *collector) output(p int) (io.Writer, io.Writer) {
	return &lineWriter{fn: func(l string) { c.line(p, l, true) }}, &lineWriter{fn: func(l string) { c.line(p, l, false) }}
}

func (c *collector) line(p int, l string, stdout bool) {
	if rest, ok := strings.CutPrefix(l, recordPrefix); ok && stdout {
		var r elasticRecord
		if err := json.Unmarshal([]byte(rest), &r); err == nil {
			c.mu.Lock()
			r.proc, r.seq = p, len(c.recs)
			c.recs = append(c.recs, r)
			c.mu.Unlock()
			select {
			case c.notify <- struct{}{}:
			default:
			}
			return
		}
	}
	c.errMu.Lock()
	fmt.Fprintf(c.stderr, "[process %d] %s\n", p, l)
	c.errMu.Unlock()
}

// since returns the records from seq on.
func (c *collector) since(seq int) []elasticRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recs[min(seq, len(c.recs)):])
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// lineWriter calls fn with every complete line written to it.
type lineWriter struct {
	buf []byte
	fn  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// member is a live process of the job, as the launcher knows it.
type member struct {
	proc *launch.Proc
	id   int // its process id (Comm.ID)
}

// chaosRun is the launcher's state.
type chaosRun struct {
	o       elasticOptions
	job     *launch.Job
	col     *collector
	rng     *rand.Rand
	live    []member // in rank order of the current generation
	out     io.Writer
	summary elasticSummary
	seen    int    // records waitFor has looked at for failures
	expect  string // the kind of record due now ("shrink" after a kill, "grow" after a spawn); others are failures
}

// elasticLaunch is the launcher: it starts the processes, makes the
// events, and prints the summary.
func elasticLaunch(ctx context.Context, o elasticOptions, args []string, stdout, stderr io.Writer) int {
	col := &collector{notify: make(chan struct{}, 1), stderr: stderr}
	// --store: the processes meet in an external store (etcd) that the
	// launcher does not host (launch.Config.Store).
	job, err := launch.Start(launch.Config{N: o.np, Args: append([]string{"elastic"}, args...), Store: o.store, Output: col.output})
	if err != nil {
		fmt.Fprintf(stderr, "collbench: elastic: %v\n", err)
		return exitUsage
	}
	defer job.Close()
	r := &chaosRun{o: o, job: job, col: col, rng: rand.New(rand.NewPCG(o.seed, 0x636f6c6c)), out: stdout,
		summary: elasticSummary{NP: o.np, Regrow: o.regrow, KillEvery: o.killEvery.String(), Bytes: o.size,
			Algorithm: o.algo, Transport: o.transport, Seed: o.seed}}
	fmt.Fprintf(stdout, "# collbench elastic: %d processes, %d events (SIGKILL every %v, any process incl. rank 0), regrow %v, %d-byte int64 all-reduce, %s over %s, seed %d\n",
		o.np, o.events, o.killEvery, o.regrow, o.size, o.algo, o.transport, o.seed)
	if !o.quiet {
		fmt.Fprintf(stdout, "# %5s %9s %8s %21s %27s %6s %9s %9s %4s\n", "event", "victim", "pid", "detect first/last ms", "shrink median/max ms", "rounds", "grow ms", "members", "size")
	}
	err = r.run(ctx)
	if err != nil {
		r.summary.Error = err.Error()
	}
	s := &r.summary
	writeElasticSummary(stdout, s)
	if o.jsonPath != "" {
		b, _ := json.MarshalIndent(s, "", "  ")
		if werr := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); werr != nil {
			fmt.Fprintf(stderr, "collbench: elastic: writing --json %s: %v\n", o.jsonPath, werr)
			return exitFailed
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "collbench: elastic: %v\n", err)
		return exitFailed
	}
	if s.Hangs > 0 || s.Wrong > 0 || s.Disagree > 0 {
		return exitFailed
	}
	return 0
}

// waitFor waits until done says so (asked again whenever a process says
// something or exits), until deadline (false), or until a process fails:
// it prints a wrong element or a failure, or a process the launcher did not
// kill exits.
func (r *chaosRun) waitFor(ctx context.Context, deadline time.Time, done func(n int) bool) (bool, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		// done reads records that may have come after this scan: it sees
		// only those before n, and the scan checks them all.
		n := r.col.len()
		for _, rec := range r.col.since(r.seen) {
			if rec.seq >= n {
				break
			}
			r.seen = rec.seq + 1
			switch rec.Kind {
			case "wrong":
				r.summary.Wrong += rec.Wrong
				return false, fmt.Errorf("process %d (pid %d) found %d wrong elements: %s", rec.ID, rec.PID, rec.Wrong, rec.Err)
			case "fail":
				return false, fmt.Errorf("process %d (pid %d) could not go on: %s", rec.ID, rec.PID, rec.Err)
			case "shrink", "grow":
				if rec.Kind != r.expect {
					return false, fmt.Errorf("process %d (pid %d) made generation %d with a %s that no event called for (members %v); its collective had failed with: %s",
						rec.ID, rec.PID, rec.Gen, rec.Kind, rec.Members, rec.Err)
				}
			}
		}
		for _, m := range r.live {
			select {
			case <-m.proc.Done():
				return false, fmt.Errorf("process %d (pid %d), which the launcher did not kill, exited: %v (its output above says why)", m.id, m.proc.Pid(), m.proc.Err())
			default:
			}
		}
		if done(n) {
			return true, nil
		}
		select {
		case <-r.col.notify:
		case <-r.job.Exited():
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
	}
}

// latest returns, for each live process, its first record of kind from
// seq up to (not including) upTo, and the processes that have none.
func (r *chaosRun) latest(kind string, seq, upTo int, procs []member) (map[int]elasticRecord, []member) {
	got := map[int]elasticRecord{}
	for _, rec := range r.col.since(seq) {
		if rec.seq >= upTo {
			break
		}
		if _, ok := got[rec.proc]; !ok && rec.Kind == kind {
			got[rec.proc] = rec
		}
	}
	var missing []member
	for _, m := range procs {
		if _, ok := got[m.proc.Index]; !ok {
			missing = append(missing, m)
		}
	}
	return got, missing
}

func (r *chaosRun) run(ctx context.Context) error {
	for _, p := range r.job.Procs() {
		r.live = append(r.live, member{proc: p, id: p.Rank})
	}
	ok, err := r.waitFor(ctx, time.Now().Add(r.o.deadline), func(n int) bool {
		_, missing := r.latest("ready", 0, n, r.live)
		return len(missing) == 0
	})
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	if !ok {
		_, missing := r.latest("ready", 0, r.seen, r.live)
		return fmt.Errorf("processes %s did not connect within --deadline %v", names(missing), r.o.deadline)
	}
	next := time.Now().Add(r.o.killEvery)
	for e := range r.o.events {
		if _, err := r.waitFor(ctx, next, func(int) bool { return false }); err != nil {
			return fmt.Errorf("before event %d: %w", e, err)
		}
		ev, err := r.event(ctx, e)
		r.summary.Events = append(r.summary.Events, ev)
		r.summary.Hangs += ev.Hangs
		r.summary.Disagree += ev.Disagreements
		if !r.o.quiet {
			writeEventLine(r.out, ev)
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", e, err)
		}
		if ev.Hangs > 0 || ev.Disagreements > 0 {
			return fmt.Errorf("event %d: %s", e, ev.Error)
		}
		next = time.Unix(0, ev.KillUnixNS).Add(r.o.killEvery)
	}
	return r.stop(ctx)
}

// event kills a random live process and waits for the survivors to
// shrink; with --regrow it then starts a replacement and waits for the
// grown communicator.
func (r *chaosRun) event(ctx context.Context, e int) (elasticEvent, error) {
	i := r.rng.IntN(len(r.live))
	victim := r.live[i]
	ev := elasticEvent{Event: e, VictimID: victim.id, VictimPID: victim.proc.Pid()}
	survivors := slices.Delete(slices.Clone(r.live), i, i+1)
	mark := r.col.len()
	killed := time.Now()
	if err := r.job.Kill(victim.proc); err != nil {
		return ev, err
	}
	ev.KillUnixNS = killed.UnixNano()
	r.live = survivors
	ev.Survivors = len(survivors)
	r.expect = "shrink"
	defer func() { r.expect = "" }()
	ok, err := r.waitFor(ctx, killed.Add(r.o.deadline), func(n int) bool {
		_, missing := r.latest("shrink", mark, n, survivors)
		return len(missing) == 0
	})
	if err != nil {
		return ev, err
	}
	recs, missing := r.latest("shrink", mark, r.seen, survivors)
	if !ok {
		ev.Hangs = len(missing)
		ev.Error = fmt.Sprintf("processes %s did not recover within --deadline %v of the kill of process %d (COLLKIT_DEBUG=INFO logs their elastic steps)",
			names(missing), r.o.deadline, victim.id)
		return ev, nil
	}
	want := ids(survivors)
	var detect, shrink []float64
	for _, m := range survivors {
		rec := recs[m.proc.Index]
		detect = append(detect, ms(rec.Start-ev.KillUnixNS))
		shrink = append(shrink, ms(rec.Ready-rec.Start))
		ev.SurvivorIDs = append(ev.SurvivorIDs, m.id)
		ev.Failures = append(ev.Failures, rec.Err)
		ev.ShrinkRounds = max(ev.ShrinkRounds, rec.Shrinks)
		ev.ResumeStep, ev.Generation = rec.Step, rec.Gen
		if !slices.Equal(rec.Members, want) {
			ev.Disagreements++
			ev.Error += fmt.Sprintf("process %d is in generation %d with members %v, want the survivors %v; ", m.id, rec.Gen, rec.Members, want)
		}
	}
	ev.ShrinkMS = shrink
	ev.DetectFirstMS, ev.DetectLastMS = slices.Min(detect), slices.Max(detect)
	ev.ShrinkMedianMS, ev.ShrinkMaxMS = percentile(shrink, 50), slices.Max(shrink)
	ev.SizeAfterKill, ev.SizeAfter, ev.Members = len(want), len(want), want
	if ev.Disagreements > 0 || !r.o.regrow {
		return ev, nil
	}

	mark = r.col.len()
	r.expect = "grow"
	p, err := r.job.Spawn()
	if err != nil {
		return ev, err
	}
	joiner := member{proc: p, id: -1}
	all := append(slices.Clone(survivors), joiner)
	ok, err = r.waitFor(ctx, p.Started.Add(r.o.deadline), func(n int) bool {
		_, mg := r.latest("grow", mark, n, survivors)
		_, mj := r.latest("joined", mark, n, []member{joiner})
		return len(mg) == 0 && len(mj) == 0
	})
	if err == nil {
		select {
		case <-p.Done():
			err = fmt.Errorf("the replacement (pid %d) exited: %v (its output above says why)", p.Pid(), p.Err())
		default:
		}
	}
	if err != nil {
		return ev, err
	}
	grows, gmissing := r.latest("grow", mark, r.seen, survivors)
	joins, jmissing := r.latest("joined", mark, r.seen, []member{joiner})
	if !ok {
		ev.Hangs = len(gmissing) + len(jmissing)
		ev.Error = fmt.Sprintf("members %s and replacement %v did not reach the grown communicator within --deadline %v of starting the replacement",
			names(gmissing), len(jmissing) > 0, r.o.deadline)
		return ev, nil
	}
	j := joins[p.Index]
	joiner.id = j.ID
	ev.JoinerID = j.ID
	ev.GrowMS = ms(j.Ready - p.Started.UnixNano())
	all[len(all)-1] = joiner
	want = ids(all)
	for _, m := range all {
		rec := j
		if m.id != j.ID {
			rec = grows[m.proc.Index]
			ev.GrowMembersMaxMS = max(ev.GrowMembersMaxMS, ms(rec.Ready-rec.Start))
		}
		ev.Generation = rec.Gen
		if !slices.Equal(rec.Members, want) {
			ev.Disagreements++
			ev.Error += fmt.Sprintf("process %d is in generation %d with members %v after the grow, want %v; ", m.id, rec.Gen, rec.Members, want)
		}
	}
	r.live = all
	ev.SizeAfter, ev.Members = len(all), want
	return ev, nil
}

// stop ends the run: SIGTERM to every live process, which stops its loop
// and says done.
func (r *chaosRun) stop(ctx context.Context) error {
	mark := r.col.len()
	for _, m := range r.live {
		if err := r.job.Signal(m.proc, syscall.SIGTERM); err != nil {
			return err
		}
	}
	live := r.live
	r.live = nil // their exits are expected now
	deadline := time.NewTimer(r.o.deadline)
	defer deadline.Stop()
	for _, m := range live {
		select {
		case <-m.proc.Done():
		case <-deadline.C:
			r.summary.Hangs++
			return fmt.Errorf("process %d (pid %d) did not stop within --deadline %v of SIGTERM", m.id, m.proc.Pid(), r.o.deadline)
		case <-ctx.Done():
			return fmt.Errorf("interrupted while stopping: %w", context.Cause(ctx))
		}
		if err := m.proc.Err(); err != nil {
			return fmt.Errorf("process %d (pid %d) failed when stopped: %v (its output above says why)", m.id, m.proc.Pid(), err)
		}
	}
	if _, err := r.waitFor(ctx, time.Now(), func(int) bool { return true }); err != nil {
		return err // a wrong element or a failure said before the stop
	}
	done, missing := r.latest("done", mark, r.col.len(), live)
	if len(missing) > 0 {
		return fmt.Errorf("processes %s stopped without saying done", names(missing))
	}
	for _, rec := range done {
		r.summary.Verified += rec.Verified
	}
	return nil
}

func ids(ms []member) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.id
	}
	return out
}

func names(ms []member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = fmt.Sprintf("%d (pid %d)", m.id, m.proc.Pid())
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// percentile is the nearest-rank p-th percentile of xs (not empty).
func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

func writeEventLine(w io.Writer, ev elasticEvent) {
	grow := "-"
	if ev.GrowMS > 0 {
		grow = fmt.Sprintf("%.1f", ev.GrowMS)
	}
	detect, shrink := "-", "-"
	if len(ev.ShrinkMS) > 0 {
		detect = fmt.Sprintf("%.1f/%.1f", ev.DetectFirstMS, ev.DetectLastMS)
		shrink = fmt.Sprintf("%.1f/%.1f", ev.ShrinkMedianMS, ev.ShrinkMaxMS)
	}
	fmt.Fprintf(w, "  %5d %9s %8d %21s %27s %6d %9s %9s %4d", ev.Event, procLabel(ev.VictimID), ev.VictimPID, detect, shrink, ev.ShrinkRounds, grow, "gen "+fmt.Sprint(ev.Generation), ev.SizeAfter)
	if ev.Error != "" {
		fmt.Fprintf(w, "  ERROR: %s", ev.Error)
	}
	fmt.Fprintln(w)
}

// procLabel names a process id as collkit numbers them: ranks of
// generation 0 keep their rank; joiners count from 1<<20.
func procLabel(id int) string {
	if id >= 1<<20 {
		return fmt.Sprintf("j%d", id-1<<20)
	}
	return fmt.Sprintf("r%d", id)
}

// Targets of issue 19 for process-level chaos.
const (
	targetShrinkMedianMS = 100
	targetShrinkP99MS    = 500
	targetGrowMS         = 1000
)

func writeElasticSummary(w io.Writer, s *elasticSummary) {
	var detectFirst, detectLast, shrink, grow []float64
	for _, ev := range s.Events {
		if len(ev.ShrinkMS) > 0 {
			detectFirst = append(detectFirst, ev.DetectFirstMS)
			detectLast = append(detectLast, ev.DetectLastMS)
			shrink = append(shrink, ev.ShrinkMS...)
		}
		if ev.GrowMS > 0 {
			grow = append(grow, ev.GrowMS)
		}
	}
	stat := func(xs []float64) string {
		if len(xs) == 0 {
			return "-"
		}
		return fmt.Sprintf("median %8.1f   p99 %8.1f   max %8.1f   (%d samples)", percentile(xs, 50), percentile(xs, 99), slices.Max(xs), len(xs))
	}
	fmt.Fprintf(w, "# summary\n")
	fmt.Fprintf(w, "%-30s %d\n", "events", len(s.Events))
	fmt.Fprintf(w, "%-30s %d\n", "hangs", s.Hangs)
	fmt.Fprintf(w, "%-30s %d\n", "wrong elements", s.Wrong)
	fmt.Fprintf(w, "%-30s %d\n", "disagreements", s.Disagree)
	fmt.Fprintf(w, "%-30s %d\n", "verified all-reduces (final)", s.Verified)
	fmt.Fprintf(w, "%-30s %s\n", "detection ms, first survivor", stat(detectFirst))
	fmt.Fprintf(w, "%-30s %s\n", "detection ms, last survivor", stat(detectLast))
	fmt.Fprintf(w, "%-30s %s\n", "shrink ms, every survivor", stat(shrink))
	fmt.Fprintf(w, "%-30s %s\n", "grow ms, start to joined", stat(grow))
	if len(shrink) > 0 {
		verdict := func(ok bool) string { return cmp.Or(map[bool]string{true: "met"}[ok], "MISSED") }
		fmt.Fprintf(w, "# targets (issue 19): median shrink < %d ms: %s; p99 shrink < %d ms: %s", targetShrinkMedianMS,
			verdict(percentile(shrink, 50) < targetShrinkMedianMS), targetShrinkP99MS, verdict(percentile(shrink, 99) < targetShrinkP99MS))
		if len(grow) > 0 {
			fmt.Fprintf(w, "; grow < %d ms: %s", targetGrowMS, verdict(slices.Max(grow) < targetGrowMS))
		}
		fmt.Fprintf(w, "; 0 hangs/wrong/disagreements: %s\n", verdict(s.Hangs == 0 && s.Wrong == 0 && s.Disagree == 0 && s.Error == ""))
	}
	if s.Error != "" {
		fmt.Fprintf(w, "# FAILED: %s\n", s.Error)
	}
}
