package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/xpuinject/xpuinject/hub"
)

// PushOptions are the flags of `xpuinject push`.
type PushOptions struct {
	Dir     string
	RepoID  string
	Private bool
	Version int
	DryRun  bool
	Model   string
	JSON    bool
}

func newPushCmd(f *Factory) *cobra.Command {
	return newPushCmdWith(f, nil)
}

// newPushCmdWith lets tests capture the parsed options (runF) instead of running.
func newPushCmdWith(f *Factory, runF func(*PushOptions) error) *cobra.Command {
	opts := &PushOptions{}
	cmd := &cobra.Command{
		Use:   "push DIR --repo-id ORG/NAME",
		Short: "publish a kernel-hub package to the Hub (build/ to branch v<N>, README.md to main)",
		Long: `Publish a kernel-hub package written by 'xpuinject package' (or by hand) to a Hub
repository of type kernel, as 'kernel-builder upload' does: the repository is created if
missing, build/** goes to branch v<N> (files under build/ that the package no longer has
are deleted there), and the card README.md goes to main.

The token is $HF_TOKEN, else the one 'huggingface-cli login' saved; $HF_ENDPOINT picks
another Hub. --dry-run prints the operations and sends nothing.`,
		Example: `  xpuinject push out/llama-kernels --repo-id my-org/llama-kernels --dry-run
  HF_TOKEN=hf_... xpuinject push out/llama-kernels --repo-id my-org/llama-kernels`,
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
			if runF != nil {
				return runF(opts)
			}
			return pushRun(cmd, f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.RepoID, "repo-id", "", "kernel repository on the Hub, ORG/NAME")
	fl.BoolVar(&opts.Private, "private", false, "create the repository private (an existing one keeps its visibility)")
	fl.IntVar(&opts.Version, "version", 0, "kernel major version, published to branch v<N> (default: metadata.json's version, else 1)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "print the operations and send nothing")
	fl.BoolVar(&opts.JSON, "json", false, "print the result (or the dry-run operations) as JSON")
	fl.StringVar(&opts.Model, "model", "", "model named in the commit message when the package does not record it")
	return cmd
}

func pushRun(cmd *cobra.Command, f *Factory, opts *PushOptions) error {
	c := newHubClient(f)
	res, err := hub.Push(cmd.Context(), c, opts.Dir, hub.PushOptions{
		RepoID:      opts.RepoID,
		Private:     opts.Private,
		Version:     opts.Version,
		DryRun:      opts.DryRun,
		Model:       opts.Model,
		ToolVersion: Version,
		Progress:    f.ErrOut,
	})
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	if opts.JSON {
		enc := json.NewEncoder(f.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if res.DryRun {
		fmt.Fprintln(f.Out, strings.Join(res.Operations, "\n"))
		return nil
	}
	switch {
	case res.BuildCommit == "" && res.CardCommit == "":
		fmt.Fprintf(f.Out, "%s %s: already up to date, nothing committed\n", res.RepoID, res.Branch)
	default:
		fmt.Fprintf(f.Out, "published %s %s: %d added, %d deleted, %d unchanged (%d through LFS)\n",
			res.RepoID, res.Branch, len(res.Added), len(res.Deleted), len(res.Unchanged), len(res.LFS))
		if res.BuildCommit != "" {
			fmt.Fprintf(f.Out, "%s commit %s\n", res.Branch, res.BuildCommit)
		}
		if res.CardCommit != "" {
			fmt.Fprintf(f.Out, "main commit %s\n", res.CardCommit)
		}
	}
	fmt.Fprintln(f.Out, res.URL)
	return nil
}
