package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/hub"
)

// PushOptions are the flags of `xpuinject push`.
type PushOptions struct {
	Dir          string
	RepoID       string
	PackedRepoID string
	Packed       string // packed weights folder ("" : found beside the package)
	Source       string // source checkpoint folder ("" : from the plan's source)
	Eval         string // eval.json to record in the packed card
	Private      bool
	Version      int
	DryRun       bool
	Model        string
	JSON         bool
	SourceRepo   string // --source-repo-id
}

func newPushCmd(f *Factory) *cobra.Command {
	return newPushCmdWith(f, nil)
}

// newPushCmdWith lets tests capture the parsed options (runF) instead of running.
func newPushCmdWith(f *Factory, runF func(*PushOptions) error) *cobra.Command {
	opts := &PushOptions{}
	cmd := &cobra.Command{
		Use:   "push DIR --repo-id ORG/NAME",
		Short: "publish a kernel package (kernel repo) and its packed weights (model repo) to the Hub",
		Long: `Publish what an xpuinject run wrote, so that kernels and transformers alone can use it:

  the kernel package (DIR, or DIR/package of a run folder) to the kernel repository
  --repo-id, as 'kernel-builder upload' does: created if missing, build/** to branch v<N>
  (files under build/ the package no longer has are deleted there), the card to main;

  its packed weights (--packed, else DIR/packed of a run folder or ../packed beside the
  package, when their plan.yaml is the package's) to the model repository
  --packed-repo-id (default <repo-id>-packed), main holding exactly: the safetensors (and
  index), plan.yaml, config.json, generation and tokenizer files copied from the source
  model (--source, else the plan's source folder or its snapshot in the HF cache), and a
  card with the usage, the source and revision, and the eval summary (--eval, else
  DIR/eval/eval.json of a run folder when it is newer than the packed plan).

The cards name the source model by its Hub id and revision; for a package planned from a
local folder, --source-repo-id ORG/NAME[@REVISION] names it (push refuses without it).

Without packed weights only the kernel repository is published. The token is $HF_TOKEN,
else the one 'hf auth login' saved; $HF_ENDPOINT picks another Hub. --dry-run prints
every operation for both repositories and sends nothing.`,
		Example: `  xpuinject push out/llama --repo-id my-org/llama-kernels --dry-run
  HF_TOKEN=hf_... xpuinject push out/llama --repo-id my-org/llama-kernels
  xpuinject push out/llama/package --packed out/llama/packed --repo-id my-org/llama-kernels`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = args[0]
			if opts.RepoID == "" {
				return &usageError{errors.New("push: --repo-id ORG/NAME is required")}
			}
			if _, err := hub.ParseRef(opts.RepoID); err != nil || strings.Contains(opts.RepoID, "@") {
				return &usageError{fmt.Errorf("push: --repo-id %q: want ORG/NAME (a Hub repository id, no revision)", opts.RepoID)}
			}
			if opts.Version < 0 {
				return &usageError{fmt.Errorf("push: --version %d: want a non-negative integer", opts.Version)}
			}
			if opts.PackedRepoID != "" && opts.PackedRepoID == opts.RepoID {
				return &usageError{fmt.Errorf("push: --packed-repo-id %s is the kernel repository; the packed weights need a repository of their own", opts.PackedRepoID)}
			}
			if runF != nil {
				return runF(opts)
			}
			return pushRun(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.RepoID, "repo-id", "", "kernel repository on the Hub, ORG/NAME")
	fl.StringVar(&opts.PackedRepoID, "packed-repo-id", "", "model repository for the packed weights (default: <repo-id>-packed)")
	fl.StringVar(&opts.Packed, "packed", "", "packed weights folder (default: DIR/packed of a run folder, or ../packed beside the package)")
	fl.StringVar(&opts.Source, "source", "", "source checkpoint folder for config and tokenizer files (default: from the plan)")
	fl.StringVar(&opts.Eval, "eval", "", "eval.json whose summary the packed card records")
	fl.BoolVar(&opts.Private, "private", false, "create the repositories private (an existing one keeps its visibility)")
	fl.IntVar(&opts.Version, "version", 0, "kernel major version, published to branch v<N> (default: metadata.json's version, else 1)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "print the operations and send nothing")
	fl.BoolVar(&opts.JSON, "json", false, "print the results (or the dry-run operations) as JSON")
	fl.StringVar(&opts.Model, "model", "", "model named in the commit message when the package does not record it")
	fl.StringVar(&opts.SourceRepo, "source-repo-id", "", "Hub model (ORG/NAME[@REVISION]) the cards name when the "+
		"package was planned from a local folder")
	return cmd
}

func pushRun(ctx context.Context, f *Factory, opts *PushOptions) error {
	set, err := findPublishSet(opts, f.ErrOut)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	res, err := publish(ctx, f, set, publishOptions{
		RepoID: opts.RepoID, PackedRepoID: opts.PackedRepoID, Private: opts.Private, Version: opts.Version,
		DryRun: opts.DryRun, Model: opts.Model, SourceRepo: opts.SourceRepo,
	})
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	if opts.JSON {
		return writeJSON(f.Out, res)
	}
	printPublished(f.Out, res)
	return nil
}

// printPublished writes what was (or would be) published, kernel repository first.
func printPublished(w io.Writer, res *publishResult) {
	for _, r := range []*hub.PushResult{res.Kernel, res.Packed} {
		if r == nil {
			continue
		}
		if r.DryRun {
			fmt.Fprintln(w, strings.Join(r.Operations, "\n"))
			continue
		}
		switch {
		case r.BuildCommit == "" && r.CardCommit == "":
			fmt.Fprintf(w, "%s %s: already up to date, nothing committed\n", r.RepoID, r.Branch)
		default:
			fmt.Fprintf(w, "published %s %s: %d added, %d deleted, %d unchanged (%d through LFS)\n",
				r.RepoID, r.Branch, len(r.Added), len(r.Deleted), len(r.Unchanged), len(r.LFS))
			if r.BuildCommit != "" {
				fmt.Fprintf(w, "%s commit %s\n", r.Branch, r.BuildCommit)
			}
			if r.CardCommit != "" {
				fmt.Fprintf(w, "main commit %s\n", r.CardCommit)
			}
		}
		fmt.Fprintln(w, r.URL)
	}
}

// findPublishSet locates the package, its packed weights, the source files and the eval
// from DIR and the flags.
func findPublishSet(opts *PushOptions, log io.Writer) (publishSet, error) {
	set := publishSet{PackageDir: opts.Dir, SourceDir: opts.Source, EvalFile: opts.Eval}
	run := isDir(filepath.Join(opts.Dir, "package", "build"))
	if run {
		set.PackageDir = filepath.Join(opts.Dir, "package")
	}
	if opts.Packed != "" {
		set.PackedDir = opts.Packed
		same, err := samePlan(set.PackageDir, opts.Packed)
		if err != nil {
			return set, err
		}
		if !same {
			return set, fmt.Errorf("--packed %s: its plan.yaml is not the package's (%s): they were written by different runs", opts.Packed, filepath.Join(set.PackageDir, "plan.yaml"))
		}
	} else {
		for _, cand := range []string{filepath.Join(opts.Dir, "packed"), filepath.Join(filepath.Dir(filepath.Clean(set.PackageDir)), "packed")} {
			if same, err := samePlan(set.PackageDir, cand); err == nil && same {
				set.PackedDir = cand
				break
			}
		}
		if set.PackedDir == "" {
			fmt.Fprintf(log, "push: no packed weights with this package's plan beside %s (pass --packed DIR): only the kernel repository is published\n", set.PackageDir)
		}
	}
	if set.EvalFile == "" && run && set.PackedDir != "" {
		ev, pl := filepath.Join(opts.Dir, "eval", "eval.json"), filepath.Join(set.PackedDir, "plan.yaml")
		if se, err := os.Stat(ev); err == nil {
			if sp, err := os.Stat(pl); err == nil && se.ModTime().After(sp.ModTime()) {
				set.EvalFile = ev
			}
		}
	}
	return set, nil
}

// samePlan reports whether folder b holds a plan.yaml with the bytes of package a's.
func samePlan(a, b string) (bool, error) {
	pa, err := os.ReadFile(filepath.Join(a, "plan.yaml"))
	if err != nil {
		return false, fmt.Errorf("%s has no plan.yaml (is it a package written by xpuinject?): %w", a, err)
	}
	pb, err := os.ReadFile(filepath.Join(b, "plan.yaml"))
	if err != nil {
		return false, fmt.Errorf("%s has no plan.yaml (is it a folder written by xpuinject pack?): %w", b, err)
	}
	return string(pa) == string(pb), nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
