package eval

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress draws a one-line progress bar (episodes done of total, rate and
// ETA) on a writer, redrawing in place with a carriage return at most every
// Interval. It implements ProgressSink.
type Progress struct {
	w        io.Writer
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	total   int
	skipped int
	done    int
	start   time.Time
	drawn   time.Time
	ended   bool
}

// NewProgress returns a progress bar on w.
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, interval: 100 * time.Millisecond, now: time.Now}
}

// IsTerminal reports whether w looks like a terminal (a character device),
// where a progress bar belongs.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Start implements ProgressSink.
func (p *Progress) Start(total, skipped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total, p.skipped, p.start = total, skipped, p.now()
	p.draw(true)
}

// Done implements ProgressSink.
func (p *Progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.draw(p.done == p.total)
}

// Finish ends the bar's line (call it once the run returns).
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended {
		p.draw(true)
		fmt.Fprintln(p.w)
		p.ended = true
	}
}

// Line renders the bar's current text.
func (p *Progress) Line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.line()
}

func (p *Progress) draw(force bool) {
	if p.ended {
		return
	}
	t := p.now()
	if !force && t.Sub(p.drawn) < p.interval {
		return
	}
	p.drawn = t
	fmt.Fprintf(p.w, "\r%s\x1b[K", p.line())
}

func (p *Progress) line() string {
	const width = 30
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	s := fmt.Sprintf("[%s] %d/%d episodes", bar, p.done, p.total)
	if p.skipped > 0 {
		s += fmt.Sprintf(" (+%d done before)", p.skipped)
	}
	elapsed := p.now().Sub(p.start).Seconds()
	if p.done > 0 && elapsed > 0 {
		rate := float64(p.done) / elapsed
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second)).Round(time.Second)
		s += fmt.Sprintf("  %.1f/s  ETA %s", rate, eta)
	}
	return s
}
