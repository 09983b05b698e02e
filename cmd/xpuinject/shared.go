package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/models"
)

// Helpers several commands share.

// tool is what outputs record as their writer.
func tool() string { return "xpuinject " + Version }

// modelInputs are the source checkpoint's folder and files, which no output may
// replace, hold or sit inside.
func modelInputs(dir string, ck *models.Checkpoint) []outdir.Input {
	in := []outdir.Input{{Path: dir, What: "the source checkpoint"}}
	if ck != nil {
		for _, f := range ck.Files {
			in = append(in, outdir.Input{Path: f, What: "a source checkpoint file"})
		}
	}
	return in
}

// newHubClient is the Hub client of a command: environment as huggingface_hub reads
// it, slow-answer notices on stderr.
func newHubClient(f *Factory) *hub.Client {
	c := hub.NewClient(f.Getenv)
	c.Notify = func(msg string) { fmt.Fprintln(f.ErrOut, msg) }
	return c
}

// checkTextFile validates --text before any work: a non-empty regular file. It returns
// the absolute path (the eval runs elsewhere and records it).
func checkTextFile(p string) (string, error) {
	f, st, err := models.OpenRegular(p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return "", &usageError{fmt.Errorf("--text %s: %w", p, err)}
	}
	f.Close()
	if st.Size() == 0 {
		return "", &usageError{fmt.Errorf("--text %s is empty; give a plain-text file with some prose", p)}
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", &usageError{fmt.Errorf("--text %s: %w", p, err)}
	}
	return abs, nil
}

// checkCount validates a count flag: 0 means the default, negative is an error.
func checkCount(flag string, n int) error {
	if n < 0 {
		return &usageError{fmt.Errorf("--%s %d: want a positive number (or 0 for the default)", flag, n)}
	}
	return nil
}

// mistypedCommand reports a first argument that is neither a model nor a command but
// close to a command ("pakc" for pack). The root command is the pipeline, so an unknown
// word is a model name unless it is none of a folder, a preset or org/name, and within
// cobra's suggestion distance of a command.
func mistypedCommand(root *cobra.Command, arg string) error {
	if arg == "" || strings.ContainsAny(arg, `/\@.`) {
		return nil
	}
	if _, err := os.Lstat(arg); err == nil {
		return nil
	}
	if _, ok := lookupPreset(arg); ok {
		return nil
	}
	sugg := root.SuggestionsFor(arg)
	if len(sugg) == 0 {
		return nil
	}
	return &usageError{fmt.Errorf("unknown command %q for %q\n\nDid you mean this?\n\t%s", arg, root.Name(), strings.Join(sugg, "\n\t"))}
}

// nearestPreset is the preset within two edits of name ("lama" -> "llama"), "" if none.
func nearestPreset(name string) string {
	ps, _ := Presets()
	best, bestD := "", 3
	for _, p := range ps {
		if d := editDistance(strings.ToLower(name), p.Name); d < bestD {
			best, bestD = p.Name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// writeJSON prints v as one indented JSON document: what --json prints, on every command.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
