package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/collkit/collkit/bench"
)

// Progress appears only for runs longer than these: short runs finish
// without a bar, and logs of short runs stay free of progress lines.
const (
	barDelay  = 3 * time.Second  // on a terminal
	lineDelay = 10 * time.Second // elsewhere (CI logs, files)
)

// progress shows how much of a run is done on stderr: a bar on a terminal,
// one line per finished size elsewhere. Both count estimated work, in which
// a size weighs what its iterations should take (bytes over a nominal
// bandwidth plus a latency per call), so that the ETA follows bytes, not
// the number of sizes. A nil *progress does nothing.
type progress struct {
	w          io.Writer
	tty        bool
	delay      time.Duration
	now        func() time.Time
	start      time.Time
	bar        *progressbar.ProgressBar
	total      float64 // estimated seconds of the whole run
	done       float64
	sizes      int // sizes finished, of sizesTotal
	sizesTotal int
	desc       string
}

// newProgress returns nil unless show is set; stderr decides between a bar
// and lines.
func newProgress(show bool, stderr *os.File, total float64, sizes int) *progress {
	if !show || total <= 0 {
		return nil
	}
	tty := term.IsTerminal(int(stderr.Fd()))
	p := &progress{w: stderr, tty: tty, delay: lineDelay, now: time.Now, total: total, sizesTotal: sizes}
	if tty {
		p.delay = barDelay
	}
	p.start = p.now()
	return p
}

// sizeWork estimates the seconds one size of a sweep takes: out of place
// and in place, each its warm-up, timed and checked calls of about 20 us
// plus the bytes at 1 GB/s (a group moves all of its bytes), with
// --min-time deciding the timed count when -n is not given.
func sizeWork(cfg bench.Config, bytes int64) float64 {
	call := 20e-6 + float64(bytes*int64(max(cfg.Group, 1)))/1e9
	timed := float64(cfg.Iters)
	if cfg.Iters == 0 {
		timed = math.Min(math.Max(cfg.MinTime.Seconds()/call, 5), float64(max(cfg.MaxIters, 5)))
	}
	return 2 * call * (timed + float64(cfg.Warmup+cfg.Check))
}

// sweepWork is sizeWork over a sweep's sizes.
func sweepWork(cfg bench.Config) float64 {
	var w float64
	for _, s := range cfg.Sizes() {
		w += sizeWork(cfg, s)
	}
	return w
}

// Describe names what is being measured now.
func (p *progress) Describe(desc string) {
	if p == nil {
		return
	}
	p.desc = desc
	if p.bar != nil {
		p.bar.Describe(desc)
	}
}

// Done counts one size of cfg's sweep finished.
func (p *progress) Done(cfg bench.Config, bytes int64) {
	if p == nil {
		return
	}
	p.done += sizeWork(cfg, bytes)
	p.sizes++
	elapsed := p.now().Sub(p.start)
	if elapsed < p.delay {
		return
	}
	frac := math.Min(p.done/p.total, 1)
	if !p.tty {
		left := "unknown"
		if frac > 0 {
			left = (time.Duration(float64(elapsed)*(1-frac)/frac) / time.Second * time.Second).String()
		}
		fmt.Fprintf(p.w, "# progress: %s %d B done; %d of %d sizes, %.0f%% of the estimated work, about %s left\n",
			p.desc, bytes, p.sizes, p.sizesTotal, 100*frac, left)
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(1000, progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.desc), progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond))
	}
	_ = p.bar.Set64(int64(1000 * frac))
}

// Finish removes the bar.
func (p *progress) Finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
	}
}

// Writer wraps w so that the bar is cleared before anything is printed; it
// is drawn again on the next Done.
func (p *progress) Writer(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return clearingWriter{w, p}
}

type clearingWriter struct {
	w io.Writer
	p *progress
}

func (c clearingWriter) Write(b []byte) (int, error) {
	if c.p.bar != nil {
		_ = c.p.bar.Clear()
	}
	return c.w.Write(b)
}
