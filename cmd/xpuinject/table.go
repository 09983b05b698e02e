package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// outputWidth is the width every table and paragraph the CLI prints fits in.
const outputWidth = 100

// textTable is a table for people: columns sized to the widest cell, narrowed until the
// row fits outputWidth (the columns in shrink first, down to their longest word, then the
// widest), with cells wrapped at spaces, commas, dots and slashes inside their column.
type textTable struct {
	header []string
	rows   [][]string
	shrink []int // column indices to narrow first, in order
}

func (t *textTable) add(cells ...string) { t.rows = append(t.rows, cells) }

const tableGap = 2

func (t *textTable) write(w io.Writer) error {
	n := len(t.header)
	width := make([]int, n)
	least := make([]int, n)
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
			for _, tok := range tokens(c, true) {
				least[i] = max(least[i], utf8.RuneCountInString(strings.TrimRight(tok, " ")))
			}
		}
	}
	total := func() int {
		s := tableGap * (n - 1)
		for _, x := range width {
			s += x
		}
		return s
	}
	for _, i := range t.shrink {
		width[i] = max(least[i], width[i]-(total()-outputWidth))
	}
	for total() > outputWidth {
		widest := -1
		for i := range width {
			if width[i] > least[i] && (widest < 0 || width[i] > width[widest]) {
				widest = i
			}
		}
		if widest < 0 {
			break // every column at its longest word: the line stays long
		}
		width[widest]--
	}
	var b strings.Builder
	for _, r := range append([][]string{t.header}, t.rows...) {
		cells := make([][]string, n)
		lines := 1
		for i := range n {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			cells[i] = wrapHang(c, width[i], width[i], true)
			lines = max(lines, len(cells[i]))
		}
		for l := range lines {
			var line strings.Builder
			for i := range n {
				s := ""
				if l < len(cells[i]) {
					s = cells[i][l]
				}
				line.WriteString(s)
				if i < n-1 {
					line.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(s)+tableGap))
				}
			}
			b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tokens splits s after each break character, keeping it with the word before: prose
// breaks at spaces only (file names and paths stay whole); a table cell also after a comma,
// semicolon, slash or a dot not followed by a digit (module paths; numbers stay whole).
func tokens(s string, cell bool) []string {
	var out []string
	start := 0
	for i, r := range s {
		brk := r == ' ' || cell && (r == ',' || r == '/' || r == ';')
		if r == '.' && cell {
			brk = i+1 < len(s) && (s[i+1] < '0' || s[i+1] > '9')
		}
		if brk {
			out = append(out, s[start:i+1])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// wrapHang breaks s into lines at break characters (tokens), the first of at most first
// runes and the others of rest; a word longer than that gets a line of its own.
func wrapHang(s string, first, rest int, cell bool) []string {
	var lines []string
	var cur strings.Builder
	n, limit := 0, first
	for _, tok := range tokens(s, cell) {
		if n > 0 && n+utf8.RuneCountInString(strings.TrimRight(tok, " ")) > limit {
			lines = append(lines, strings.TrimRight(cur.String(), " "))
			cur.Reset()
			n, limit = 0, rest
			tok = strings.TrimLeft(tok, " ")
		}
		cur.WriteString(tok)
		n += utf8.RuneCountInString(tok)
	}
	if cur.Len() > 0 || len(lines) == 0 {
		lines = append(lines, strings.TrimRight(cur.String(), " "))
	}
	return lines
}

// writeParagraph prints prefix+text wrapped at outputWidth, every line after the first
// indented by hang spaces (a footnote's "[3] ").
func writeParagraph(w io.Writer, prefix, text string, hang int) {
	for i, l := range wrapHang(prefix+text, outputWidth, outputWidth-hang, false) {
		if i > 0 {
			l = strings.Repeat(" ", hang) + l
		}
		fmt.Fprintln(w, l)
	}
}
