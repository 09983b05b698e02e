package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// Every command's help fits maxColumns: the whole text 'xpuinject CMD --help' prints.
func TestHelpWidth(t *testing.T) {
	root := NewRootCmd(&Factory{Getenv: func(string) string { return "" }})
	// Added by cobra when the command runs; their help is printed as ours is.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		var buf bytes.Buffer
		c.SetOut(&buf)
		c.SetErr(&buf)
		if err := c.Help(); err != nil {
			t.Fatalf("%s: %v", c.CommandPath(), err)
		}
		seen++
		for i, line := range strings.Split(buf.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > maxColumns {
				t.Errorf("%s --help, line %d: %d columns (at most %d):\n%s", c.CommandPath(), i+1, n, maxColumns, line)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if seen < 15 { // the pipeline, its 8 commands, help, completion and its 4 shells
		t.Fatalf("walked %d commands; want every command (at least 15)", seen)
	}
}

// Every usage error fits maxColumns, "xpuinject: " prefix included, and names what to fix.
func TestUsageErrorWidth(t *testing.T) {
	tiny := filepath.Join(fixtures, "llama-tiny")
	empty := t.TempDir()
	for _, args := range [][]string{
		{"generate"}, {"generate", "a", "b"}, {"plan"}, {"plan", "/nonexistent"}, {"plan", "llama-odd"},
		{"plan", empty}, {"plan", "llama@"}, {"pack", tiny}, {"pack"}, {"package", tiny}, {"eval", tiny},
		{"push"}, {"push", empty}, {"fetch"}, {"kernels", "x"}, {"pakc"}, {"plan", tiny, "--bogus"},
		{"plan", tiny, "--dtype", "fp8"}, {"plan", tiny, "--disable", "flash"}, {"help", "nope"},
		{tiny, "--push"}, {tiny, "--push", "--repo-id", "a/b"}, {"generate", empty, "--prompt", "hi"},
	} {
		code, _, errOut := runCLI(t, nil, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d:\n%s", args, code, exitUsage, errOut)
		}
		for _, line := range strings.Split(strings.TrimRight(errOut, "\n"), "\n") {
			if n := utf8.RuneCountInString(line); n > maxColumns {
				t.Errorf("%q: a line of %d columns (at most %d):\n%s", args, n, maxColumns, line)
			}
		}
	}
}

// On a terminal every error line fits maxColumns, whatever the message.
func TestErrorsWrapOnATerminal(t *testing.T) {
	long := strings.Repeat("word ", 50) + "end"
	got := wrapLines("xpuinject: "+long+"\nsecond line", maxColumns)
	lines := strings.Split(got, "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > maxColumns {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields("xpuinject: "+long+" second line"), " ") ||
		lines[len(lines)-1] != "second line" || !strings.HasPrefix(lines[1], "  word") {
		t.Errorf("wrapped %q", got)
	}
	if w := wrapLines(strings.Repeat("x", 150), maxColumns); w != strings.Repeat("x", 150) {
		t.Errorf("an unbreakable word was cut: %q", w)
	}
	var errOut bytes.Buffer
	f := &Factory{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &errOut, Getenv: func(string) string { return "" },
		IsTerminal: true}
	dir := t.TempDir()
	Main([]string{"plan", filepath.Join(dir, strings.Repeat("long-folder-name-", 3), "and", "more", "words")}, f)
	for _, l := range strings.Split(strings.TrimRight(errOut.String(), "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > maxColumns && len(strings.Fields(l)) > 1 {
			t.Errorf("a terminal error line of %d columns, not one long word: %q", n, l)
		}
	}
}
