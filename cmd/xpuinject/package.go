package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/inject/emit"
	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// packageOptions are the flags of `xpuinject package`.
type packageOptions struct {
	Model   string
	Out     string
	Name    string
	Version int
	License string
	RepoID  string
	Packed  string
	Force   bool
	Plan    planFlags
	JSON    bool
}

func newPackageCmd(f *Factory) *cobra.Command { return newPackageCmdWith(f, nil) }

func newPackageCmdWith(f *Factory, runF func(context.Context, *packageOptions) error) *cobra.Command {
	o := &packageOptions{}
	cmd := &cobra.Command{
		Use:   "package MODEL --out DIR",
		Short: "write the kernel-hub package: kernels, layers and the injection of the plan",
		Long: `Write a kernel-hub package for MODEL's plan: build/torch-cuda and build/torch-xpu
(noarch Triton variants with metadata.json and the plan), torch-ext/ sources, build.toml,
a card README.md and plan.yaml. The package injects itself: its inject(model, packed=...)
carries out the plan. The folder is assembled aside and renamed into place. An earlier
package in DIR is replaced only with --force; any other non-empty DIR, a file, or a DIR
holding or inside MODEL is refused.`,
		Example: `  xpuinject package testdata/fixtures/llama-tiny --out out/llama-tiny/package`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Model = args[0]
			if o.Out == "" {
				return &usageError{fmt.Errorf("--out DIR is required")}
			}
			if o.Version < 1 {
				return &usageError{fmt.Errorf("--version %d: want a major version of 1 or more", o.Version)}
			}
			if err := o.Plan.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			_, err := packageRun(cmd.Context(), f, o)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Out, "out", "", "package folder to write")
	fl.StringVar(&o.Name, "name", "", "kernel name (default: xpuinject-<model>)")
	fl.IntVar(&o.Version, "version", 1, "kernel major version (Hub branch v<N>)")
	fl.StringVar(&o.License, "license", "apache-2.0", "license of the package")
	fl.StringVar(&o.RepoID, "repo-id", "", "Hub repository the package is for (card, build.toml)")
	fl.StringVar(&o.Packed, "packed-repo-id", "", "Hub model repository of its packed weights, named in the card (default: <repo-id>-packed)")
	fl.BoolVar(&o.Force, "force", false, "replace an earlier package in --out (never other files)")
	fl.BoolVar(&o.JSON, "json", false, "print what was written as JSON")
	addPlanFlags(cmd, &o.Plan)
	return cmd
}

func packageRun(ctx context.Context, f *Factory, o *packageOptions) (*emit.Result, error) {
	// A refused --out (an earlier package without --force) is a usage error found before any
	// work; emit.Write checks again with the checkpoint's files.
	if _, local, ok := argLabel(o.Model); ok {
		var in []outdir.Input
		if local != "" {
			in = modelInputs(local, nil)
		}
		if err := outdir.Check(o.Out, outdir.Options{Kind: outdir.KindPackage, Replace: o.Force, Inputs: in}); err != nil {
			return nil, err
		}
	}
	dir, g, pl, err := loadPlan(ctx, f, o.Model, o.Plan)
	if err != nil {
		return nil, err
	}
	res, err := emit.Write(ctx, pl, o.Out, emit.Options{
		Name: o.Name, Version: o.Version, License: o.License, RepoID: o.RepoID, PackedRepoID: o.Packed,
		ModelClass: modelClass(g.Checkpoint), Model: modelLabel(o.Model, pl), Tool: tool(), Force: o.Force,
		Inputs: modelInputs(dir, g.Checkpoint),
	})
	if err != nil {
		return nil, err
	}
	if o.JSON {
		return res, writeJSON(f.Out, packageSummary{Dir: res.Dir, Kernel: res.Name, Files: res.Files, Plan: pl.Counts().String()})
	}
	fmt.Fprintf(f.Out, "%s\n", res.Dir)
	fmt.Fprintf(f.ErrOut, "package %s: %d files (build/torch-cuda, build/torch-xpu, README.md, plan.yaml); %s\n",
		res.Name, len(res.Files), pl.Counts())
	return res, nil
}

// packageSummary is package's --json result.
type packageSummary struct {
	Dir    string   `json:"dir"`
	Kernel string   `json:"kernel"`
	Files  []string `json:"files"`
	Plan   string   `json:"plan"` // the plan's counts, as the card states them
}

// modelClass is the transformers class the source checkpoint names (config.json's
// architectures[0]), "" when it names none.
func modelClass(ck *models.Checkpoint) string {
	if ck == nil {
		return ""
	}
	if a, ok := ck.Config["architectures"].([]any); ok && len(a) > 0 {
		if s, ok := a[0].(string); ok {
			return s
		}
	}
	return ""
}

// modelLabel names the model in cards and commit messages: the Hub repo when there is
// one, else the folder name.
func modelLabel(arg string, pl *plan.Plan) string {
	if pl.Source.Repo != "" {
		return pl.Source.Repo
	}
	return filepath.Base(filepath.Clean(arg))
}
