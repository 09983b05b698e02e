package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

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
	JSON     bool
}

// Other commands turn MODEL into files through resolveModel (resolve.go), which calls
// fetchSnapshot for a model that is not cached yet: it downloads with fetch's defaults.
func init() {
	fetchSnapshot = func(ctx context.Context, f *Factory, ref hub.Ref) (string, string, error) {
		return snapshot(ctx, f, ref, &fetchOptions{Workers: 8, RepoType: "model"})
	}
}

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

MODEL is a preset name, org/name or org/name@revision; a local folder is printed as is.
$HF_ENDPOINT, $HF_TOKEN (else the token file) and $HF_HUB_OFFLINE are honoured; offline, or
when the Hub cannot be reached, a cached snapshot of the revision is used.

` + presetNames() + `.`,
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
	fl.BoolVar(&o.JSON, "json", false, `print {"dir": FOLDER} instead of the folder`)
	return cmd
}

// parseModelRef turns MODEL (preset or org/name[@rev]) and --revision into a Ref.
func parseModelRef(model, revision string) (hub.Ref, error) {
	name, rev, hasRev := strings.Cut(model, "@")
	var ref hub.Ref
	if p, ok := lookupPreset(name); ok {
		ref = p.Ref()
		if hasRev {
			if rev == "" {
				return hub.Ref{}, &usageError{fmt.Errorf("%q: empty revision after @", model)}
			}
			ref.Revision = rev
		}
	} else {
		r, err := hub.ParseRef(model)
		if err != nil || (hasRev && rev == "") {
			return hub.Ref{}, &usageError{fmt.Errorf("%q is neither a preset nor org/name[@revision]\n(%s)", model, presetNames())}
		}
		ref = r
	}
	if revision != "" {
		if hasRev && ref.Revision != revision {
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
	if o.JSON {
		return writeJSON(f.Out, map[string]string{"dir": dir})
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
	dir, _, err := snapshot(ctx, f, ref, o)
	return dir, err
}

// snapshot downloads ref with o's selection, progress on f.ErrOut as o asks.
func snapshot(ctx context.Context, f *Factory, ref hub.Ref, o *fetchOptions) (string, string, error) {
	c := newHubClient(f)
	opts := hub.FetchOptions{Include: o.Include, Exclude: o.Exclude, Workers: o.Workers, RepoType: o.RepoType}
	if !o.Quiet {
		opts.Warn = func(msg string) { fmt.Fprintln(f.ErrOut, "warning: "+msg) }
		if f.IsTerminal {
			tp := hub.NewTermProgress(f.ErrOut)
			defer tp.Close()
			if f.Term != nil {
				if w, _, err := term.GetSize(int(f.Term.Fd())); err == nil {
					tp.Columns = w
				}
			}
			opts.Progress = tp
		} else {
			opts.Progress = hub.NewLineProgress(f.ErrOut)
		}
	}
	return c.Snapshot(ctx, hub.CacheFromEnv(f.Getenv), ref, opts)
}
