package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress display modes.
const (
	progressAuto  = "auto"  // a bar on a terminal, lines otherwise
	progressBar   = "bar"   // always a bar
	progressLines = "lines" // plain periodic lines
	progressNone  = "none"
)

// snapshot is one sample of a consumer's state, whichever shape it has.
type snapshot struct {
	at          time.Duration // since the run started
	outstanding int64         // received and unsettled (flow control's count)
	buffered    int64         // received, not yet handed to processing
	processing  int64         // handed to processing, not settled
	acked       int64         // the server's count when known
	redelivered int64
	expired     int64
	// serverOutstanding is what the server counts as out: it includes
	// messages in transport buffers that the client has not read yet.
	serverOutstanding int64
}

// progress shows a run's progress towards total acks.
type progress interface {
	update(s snapshot)
	finish(s snapshot)
}

func checkProgressMode(mode string) error {
	switch mode {
	case progressAuto, progressBar, progressLines, progressNone:
		return nil
	}
	return usagef("--progress %q: want auto, bar, lines or none", mode)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newProgress returns the display for mode on w; lines are printed every
// interval.
func newProgress(w io.Writer, mode string, total int64, label string, interval time.Duration) progress {
	if mode == progressAuto {
		mode = progressLines
		if isTerminal(w) {
			mode = progressBar
		}
	}
	switch mode {
	case progressBar:
		return &barProgress{bar: progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(label),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("acks"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetPredictTime(false),
		), label: label, w: w}
	case progressLines:
		return &lineProgress{w: w, total: total, label: label, every: interval}
	}
	return noProgress{}
}

// barProgress is a progress bar of acks with the live counters after it.
type barProgress struct {
	bar   *progressbar.ProgressBar
	label string
	w     io.Writer
}

func (p *barProgress) update(s snapshot) {
	p.bar.Describe(fmt.Sprintf("%s  out %d  buf %d  proc %d  redeliv %d", p.label, s.outstanding, s.buffered, s.processing, s.redelivered))
	_ = p.bar.Set64(s.acked)
}

func (p *barProgress) finish(s snapshot) {
	p.update(s)
	_ = p.bar.Finish()
	fmt.Fprintln(p.w) // the bar leaves the cursor on its line
}

// lineProgress prints a line every interval: for logs and pipes.
type lineProgress struct {
	w     io.Writer
	total int64
	label string
	every time.Duration
	last  time.Duration
	shown bool
}

func (p *lineProgress) update(s snapshot) {
	if p.shown && s.at-p.last < p.every {
		return
	}
	p.shown, p.last = true, s.at
	p.print(s)
}

func (p *lineProgress) print(s snapshot) {
	fmt.Fprintf(p.w, "%s %6.1fs  acked %d/%d  outstanding %d  buffered %d  processing %d  redelivered %d  expired %d\n",
		p.label, s.at.Seconds(), s.acked, p.total, s.outstanding, s.buffered, s.processing, s.redelivered, s.expired)
}

func (p *lineProgress) finish(s snapshot) { p.print(s) }

type noProgress struct{}

func (noProgress) update(snapshot) {}
func (noProgress) finish(snapshot) {}
