package hub

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/xpuinject/xpuinject/models"
)

// ProgressSink receives download progress; its methods are called from several
// goroutines. total is -1 when unknown; FileAdvance may go negative when a download
// restarts from zero.
type ProgressSink interface {
	FileStart(name string, total, done int64)
	FileAdvance(name string, n int64)
	FileDone(name string, cached bool, err error)
}

// ProgressPlanner is optionally implemented by a ProgressSink that wants the whole
// selection (path -> size, -1 when unknown) before any file starts, for a total.
type ProgressPlanner interface {
	Plan(files map[string]int64)
}

type nopProgress struct{}

func (nopProgress) FileStart(string, int64, int64) {}
func (nopProgress) FileAdvance(string, int64)      {}
func (nopProgress) FileDone(string, bool, error)   {}

type fileState struct {
	name        string
	total, done int64
	start       int64 // bytes present when it started (not counted in the rate)
	began       time.Time
	finished    bool
	pending     bool // planned, not started
}

type tracker struct {
	mu    sync.Mutex
	files map[string]*fileState
	order []string
	began time.Time
}

func (t *tracker) start(name string, total, done int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.files == nil {
		t.files = map[string]*fileState{}
		t.began = time.Now()
	}
	f, ok := t.files[name]
	if !ok {
		f = &fileState{name: name}
		t.files[name] = f
		t.order = append(t.order, name)
	}
	f.total, f.done, f.start, f.began, f.finished, f.pending = total, done, done, time.Now(), false, false
}

// plan registers files that have not started yet, so totals cover the whole selection.
func (t *tracker) plan(files map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.files == nil {
		t.files = map[string]*fileState{}
		t.began = time.Now()
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := t.files[n]; !ok {
			t.files[n] = &fileState{name: n, total: files[n], pending: true}
			t.order = append(t.order, n)
		}
	}
}

func (t *tracker) advance(name string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.files[name]; ok {
		f.done += n
	}
}

func (t *tracker) done(name string) *fileState {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.files[name]
	if !ok {
		return &fileState{name: name}
	}
	f.finished = true
	if f.total >= 0 {
		f.done = f.total
	}
	c := *f
	return &c
}

// LineProgress writes one line per finished file, for logs and pipes.
type LineProgress struct {
	W io.Writer
	t tracker
}

// NewLineProgress returns a LineProgress writing to w.
func NewLineProgress(w io.Writer) *LineProgress { return &LineProgress{W: w} }

func (p *LineProgress) FileStart(name string, total, done int64) { p.t.start(name, total, done) }
func (p *LineProgress) FileAdvance(name string, n int64)         { p.t.advance(name, n) }
func (p *LineProgress) FileDone(name string, cached bool, err error) {
	f := p.t.done(name)
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	switch {
	case err != nil:
		fmt.Fprintf(p.W, "failed  %s\n", name)
	case cached:
		fmt.Fprintf(p.W, "cached  %s (%s)\n", name, models.HumanBytes(f.done))
	default:
		el := time.Since(f.began).Seconds()
		fmt.Fprintf(p.W, "fetched %s (%s in %.1fs)\n", name, models.HumanBytes(f.done), el)
	}
}

// TermProgress draws a bar per active file and a total line on a terminal,
// redrawing in place every Interval.
type TermProgress struct {
	W     io.Writer
	Width int // bar width in cells
	// Columns, when positive, is the terminal width: lines are cut to fit, since a
	// wrapped line would break the in-place redraw.
	Columns  int
	Interval time.Duration
	t        tracker
	lines    int // lines drawn last time
	stop     chan struct{}
	stopped  chan struct{}
	once     sync.Once
	out      sync.Mutex
}

// NewTermProgress starts a redraw loop on w; call Close when done.
func NewTermProgress(w io.Writer) *TermProgress {
	p := &TermProgress{W: w, Width: 24, Interval: 100 * time.Millisecond, stop: make(chan struct{}), stopped: make(chan struct{})}
	go p.loop()
	return p
}

func (p *TermProgress) FileStart(name string, total, done int64) { p.t.start(name, total, done) }

// Plan implements ProgressPlanner.
func (p *TermProgress) Plan(files map[string]int64)      { p.t.plan(files) }
func (p *TermProgress) FileAdvance(name string, n int64) { p.t.advance(name, n) }
func (p *TermProgress) FileDone(name string, cached bool, err error) {
	p.t.done(name)
}

func (p *TermProgress) loop() {
	defer close(p.stopped)
	tk := time.NewTicker(p.Interval)
	defer tk.Stop()
	for {
		select {
		case <-p.stop:
			p.draw()
			return
		case <-tk.C:
			p.draw()
		}
	}
}

// Close draws the final state and stops redrawing.
func (p *TermProgress) Close() {
	p.once.Do(func() { close(p.stop) })
	<-p.stopped
}

func (p *TermProgress) draw() {
	p.t.mu.Lock()
	var lines []string
	var tot, done, fresh int64
	unknown := false
	finished := 0
	for _, n := range p.t.order {
		f := p.t.files[n]
		if f.total < 0 {
			unknown = true
		} else {
			tot += f.total
		}
		done += f.done
		fresh += f.done - f.start
		if f.finished {
			finished++
			continue
		}
		if f.pending {
			continue
		}
		lines = append(lines, p.bar(shorten(f.name, 32), f.total, f.done, f.done-f.start, time.Since(f.began)))
	}
	sort.Strings(lines)
	n := len(p.t.order)
	var el time.Duration
	if !p.t.began.IsZero() {
		el = time.Since(p.t.began)
	}
	p.t.mu.Unlock()
	if n == 0 {
		return
	}
	if unknown {
		tot = -1
	}
	lines = append(lines, p.bar(fmt.Sprintf("total %d/%d files", finished, n), tot, done, fresh, el))
	var b strings.Builder
	if p.lines > 0 {
		fmt.Fprintf(&b, "\r\x1b[%dA", p.lines)
	}
	for _, l := range lines {
		if r := []rune(l); p.Columns > 1 && len(r) >= p.Columns {
			l = string(r[:p.Columns-1])
		}
		b.WriteString("\r\x1b[2K" + l + "\n")
	}
	// clear lines left from a taller previous frame
	for i := len(lines); i < p.lines; i++ {
		b.WriteString("\r\x1b[2K\n")
	}
	if extra := p.lines - len(lines); extra > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", extra)
	}
	p.out.Lock()
	io.WriteString(p.W, b.String())
	p.out.Unlock()
	p.lines = len(lines)
}

// bar renders "name [#####-----]  45%  1.2 MB/2.7 MB  3.4 MB/s  ETA 1s".
func (p *TermProgress) bar(name string, total, done, fresh int64, el time.Duration) string {
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(fresh) / s
	}
	if total < 0 {
		return fmt.Sprintf("%-32s %s  %s/s", name, models.HumanBytes(done), models.HumanBytes(int64(rate)))
	}
	frac := 1.0
	if total > 0 {
		frac = min(max(float64(done)/float64(total), 0), 1)
	}
	filled := int(frac * float64(p.Width))
	eta := "-"
	if rate > 0 && done < total {
		eta = (time.Duration(float64(total-done) / rate * float64(time.Second))).Round(time.Second).String()
	} else if done >= total {
		eta = "0s"
	}
	return fmt.Sprintf("%-32s [%s%s] %3.0f%%  %s/%s  %s/s  ETA %s", name,
		strings.Repeat("#", filled), strings.Repeat("-", p.Width-filled), frac*100,
		models.HumanBytes(done), models.HumanBytes(total), models.HumanBytes(int64(rate)), eta)
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}
