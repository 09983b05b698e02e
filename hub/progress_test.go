package hub

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLineProgress(t *testing.T) {
	var b bytes.Buffer
	p := NewLineProgress(&b)
	p.FileStart("a.json", 10, 10)
	p.FileDone("a.json", true, nil)
	p.FileStart("w.safetensors", 2_500_000, 0)
	p.FileAdvance("w.safetensors", 2_500_000)
	p.FileDone("w.safetensors", false, nil)
	p.FileStart("x.bin", -1, 0)
	p.FileDone("x.bin", false, errors.New("boom"))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || lines[0] != "cached  a.json (10 B)" || !strings.HasPrefix(lines[1], "fetched w.safetensors (2.5 MB in ") || lines[2] != "failed  x.bin" {
		t.Errorf("lines %q", lines)
	}
}

func TestTermProgressFrames(t *testing.T) {
	var b bytes.Buffer
	p := &TermProgress{W: &b, Width: 10, Columns: 60, Interval: time.Hour, stop: make(chan struct{}), stopped: make(chan struct{})}
	p.Plan(map[string]int64{"a": 100, "b": 300})
	p.FileStart("a", 100, 0)
	p.FileAdvance("a", 50)
	p.draw()
	first := b.String()
	if !strings.Contains(first, "a ") || !strings.Contains(first, "[#####-----]  50%") || !strings.Contains(first, "total 0/2 files") || !strings.Contains(first, " 12%") {
		t.Errorf("frame %q", first)
	}
	for _, l := range strings.Split(first, "\n") {
		if l = strings.TrimPrefix(l, "\r\x1b[2K"); len([]rune(l)) >= 60 {
			t.Errorf("line longer than the terminal: %q", l)
		}
	}
	b.Reset()
	p.FileDone("a", false, nil)
	p.FileStart("b", 300, 0)
	p.FileAdvance("b", 300)
	p.FileDone("b", false, nil)
	p.draw()
	last := b.String()
	// Back up over the 2 lines drawn before, draw the total alone, clear the rest.
	if !strings.HasPrefix(last, "\r\x1b[2A") || !strings.Contains(last, "total 2/2 files") || !strings.Contains(last, "100%") {
		t.Errorf("final frame %q", last)
	}
}
