package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/hub"
)

// fetchOptions are the flags and argument of `xpuinject fetch`.
type fetchOptions struct {
	Model    string
	Revision string
	Include  []string
	Exclude  []string
	Quiet    bool
	Workers  int
	RepoType string
}

// presetRef maps a preset name ("llama") to "org/name[@rev]"; the presets file sets it
// (nil: only org/name references are accepted).
var presetRef func(name string) (string, bool)

func newFetchCmd(f *Factory) *cobra.Command { return newFetchCmdWith(f, nil) }

// newFetchCmdWith takes runF so tests can capture the parsed options.
func newFetchCmdWith(f *Factory, runF func(context.Context, *fetchOptions) error) *cobra.Command {
	o := &fetchOptions{}
	cmd := &cobra.Command{
		Use:   "fetch MODEL",
		Short: "download a model into the Hugging Face cache and print its snapshot folder",
		Long: `Download what a model needs (config, tokenizer, safetensors) into the Hugging Face
cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), laid out as
huggingface_hub lays it out, and print the snapshot folder on stdout.

MODEL is org/name or org/name@revision. $HF_ENDPOINT, $HF_TOKEN (else the token file)
and $HF_HUB_OFFLINE are honoured; offline, or when the Hub cannot be reached, a cached
snapshot of the revision is used.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Model = args[0]
			if o.Workers < 0 {
				return &usageError{fmt.Errorf("--workers must be positive, got %d", o.Workers)}
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return fetchRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Revision, "revision", "", "branch, tag or commit (default: main, or the @revision of MODEL)")
	fl.StringSliceVar(&o.Include, "include", nil, "only files matching these globs (fnmatch, as huggingface_hub's allow_patterns)")
	fl.StringSliceVar(&o.Exclude, "exclude", nil, "skip files matching these globs")
	fl.BoolVarP(&o.Quiet, "quiet", "q", false, "no progress output")
	fl.IntVar(&o.Workers, "workers", 8, "parallel file downloads")
	fl.StringVar(&o.RepoType, "repo-type", "model", "model, dataset or kernel")
	return cmd
}

// parseModelRef turns MODEL (preset or org/name[@rev]) and --revision into a Ref.
func parseModelRef(model, revision string) (hub.Ref, error) {
	s := model
	if presetRef != nil && !strings.Contains(model, "/") {
		name, rev, _ := strings.Cut(model, "@")
		if r, ok := presetRef(name); ok {
			s = r
			if rev != "" {
				s = strings.SplitN(r, "@", 2)[0] + "@" + rev
			}
		}
	}
	ref, err := hub.ParseRef(s)
	if err != nil {
		return hub.Ref{}, &usageError{err}
	}
	if revision != "" {
		if strings.Contains(s, "@") && ref.Revision != revision {
			return hub.Ref{}, &usageError{fmt.Errorf("revision given twice: %q in MODEL and --revision %q", ref.Revision, revision)}
		}
		ref.Revision = revision
	}
	return ref, nil
}

func fetchRun(ctx context.Context, f *Factory, o *fetchOptions) error {
	dir, err := fetchModel(ctx, f, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(f.Out, dir)
	return nil
}

// fetchModel returns the local folder of a model: a local folder as is, else the
// snapshot folder after downloading. Other commands call it to turn MODEL into files.
func fetchModel(ctx context.Context, f *Factory, o *fetchOptions) (string, error) {
	if st, err := os.Stat(o.Model); err == nil && st.IsDir() {
		abs, err := filepath.Abs(o.Model)
		if err != nil {
			return "", err
		}
		return abs, nil
	}
	ref, err := parseModelRef(o.Model, o.Revision)
	if err != nil {
		return "", err
	}
	c := hub.NewClient(f.Getenv)
	opts := hub.FetchOptions{Include: o.Include, Exclude: o.Exclude, Workers: o.Workers, RepoType: o.RepoType}
	if !o.Quiet {
		opts.Warn = func(msg string) { fmt.Fprintln(f.ErrOut, "warning: "+msg) }
		if f.IsTerminal {
			tp := hub.NewTermProgress(f.ErrOut)
			defer tp.Close()
			opts.Progress = tp
		} else {
			opts.Progress = hub.NewLineProgress(f.ErrOut)
		}
	}
	dir, _, err := c.Snapshot(ctx, hub.CacheFromEnv(f.Getenv), ref, opts)
	return dir, err
}
