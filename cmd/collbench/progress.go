package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressDelay is how long a run goes before it gets a progress bar: short
// runs finish without one.
const progressDelay = 3 * time.Second

// progress shows how many of a run's sizes are done on stderr, for runs
// longer than progressDelay, when stderr is a terminal. A nil *progress
// does nothing.
type progress struct {
	bar         *progressbar.ProgressBar
	start       time.Time
	total, done int
	desc        string
}

// newProgress returns nil unless show is set and stderr is a terminal.
func newProgress(show bool, total int) *progress {
	if !show || total <= 0 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progress{start: time.Now(), total: total}
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

// Add counts n more sizes done.
func (p *progress) Add(n int) {
	if p == nil {
		return
	}
	p.done += n
	if p.bar == nil && time.Since(p.start) >= progressDelay {
		p.bar = progressbar.NewOptions(p.total, progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(p.desc), progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("sizes"), progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond))
	}
	if p.bar != nil {
		_ = p.bar.Set(p.done)
	}
}

// Finish removes the bar.
func (p *progress) Finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish()
	}
}

// Writer wraps w so that the bar is cleared before anything is printed; it
// is drawn again on the next Add.
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
