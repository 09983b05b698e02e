package xpuinject_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// The README is what a new user reads first: short, narrow, and in order: what it does (three
// lines), the install, the two commands, then a GPU run; the reference lives in docs/.
func TestReadmeShapeAndOrder(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) >= 150 {
		t.Errorf("README.md has %d lines; keep it under 150 (the reference goes to docs/)", len(lines))
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("README.md:%d: %d columns (at most 100)", i+1, n)
		}
	}
	// the opening paragraph: three lines after the title
	if para := strings.SplitN(strings.SplitN(text, "\n\n", 3)[1], "\n", -1); len(para) != 3 {
		t.Errorf("the README opens with %d lines of what the tool does, want 3", len(para))
	}
	last := -1
	for _, want := range []string{"## Install", "scripts/install", "go install ./cmd/xpuinject",
		"## The two commands", "    scripts/demo\n", "    scripts/test\n", "## A GPU run"} {
		i := strings.Index(text, want)
		if i < 0 || i < last {
			t.Errorf("README: %q missing or out of order", want)
		}
		last = i
	}
}

// CI runs exactly scripts/test, the command the README names.
func TestCIRunsScriptsTest(t *testing.T) {
	b, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "#!/usr/bin/env bash\nexec scripts/test\n" {
		t.Errorf(".ci/run is %q; it must run exactly scripts/test", b)
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the README and the docs pages names a file that exists, and an
// anchor names a heading of that file.
func TestDocLinksResolve(t *testing.T) {
	pages, _ := filepath.Glob("docs/*.md")
	pages = append(pages, "README.md")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			c, err := os.ReadFile(path)
			if err != nil {
				if st, serr := os.Stat(path); serr == nil && st.IsDir() {
					continue
				}
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if anchor != "" && !hasAnchor(string(c), anchor) {
				t.Errorf("%s: link %q: %s has no heading for #%s", page, target, path, anchor)
			}
		}
	}
}

// hasAnchor reports whether markdown has a heading whose GitHub anchor is anchor
// (lower case, punctuation dropped, spaces to dashes).
func hasAnchor(markdown, anchor string) bool {
	for _, l := range strings.Split(markdown, "\n") {
		h := strings.TrimLeft(l, "#")
		if h == l || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		if b.String() == anchor {
			return true
		}
	}
	return false
}
