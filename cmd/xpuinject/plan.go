package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// planOptions are the flags and argument of `xpuinject plan`.
type planOptions struct {
	Model   string
	Format  string   // table, yaml or json
	Disable []string // kernel names
}

var planFormats = []string{"table", "yaml", "json"}

func newPlanCmd(f *Factory) *cobra.Command { return newPlanCmdWith(f, nil) }

// newPlanCmdWith takes runF so tests can capture the parsed options.
func newPlanCmdWith(f *Factory, runF func(context.Context, *planOptions) error) *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan MODEL",
		Short: "print which kernel replaces each layer, and the weight transforms",
		Long: `Print the layer -> kernel plan of a model: for every layer the kernel that replaces
it or "keep" with the reason, the weight transforms (fold-bn, concat-qkv, cast-bf16,
prepack-kmajor, ...) and, in yaml/json, the tensors the packed checkpoint will hold
(the plan.yaml schema; see inject/PLAN.md).

MODEL is a local folder with config.json and safetensors, a preset name (` + presetNames() + `),
or org/name[@revision]: read from the Hugging Face cache, downloaded first when it is not
there. Only config.json and the safetensors headers are read, never tensor data.`,
		Example: `  xpuinject plan testdata/fixtures/llama-tiny
  xpuinject plan llama --format yaml > plan.yaml
  xpuinject plan Qwen/Qwen2.5-0.5B --disable add-rmsnorm,attention-prefill`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Model = args[0]
			if !slices.Contains(planFormats, o.Format) {
				return &usageError{fmt.Errorf("--format %q: want one of %s", o.Format, strings.Join(planFormats, ", "))}
			}
			if err := checkDisable(o.Disable); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return planRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Format, "format", "table", "output format: table, yaml or json")
	fl.StringSliceVar(&o.Disable, "disable", nil, "kernels not to use, comma-separated (see 'xpuinject kernels')")
	return cmd
}

// checkDisable validates --disable: every name must be a registry kernel.
func checkDisable(disable []string) error {
	reg := kernels.Default()
	for _, d := range disable {
		if _, ok := reg.ByName(d); !ok {
			return &usageError{fmt.Errorf("--disable %q: no such kernel (kernels: %s)", d, strings.Join(reg.Names(), ", "))}
		}
	}
	return nil
}

// loadPlan resolves MODEL, reads its tensor headers and plans it: the first steps of
// plan, pack, package and the whole pipeline.
func loadPlan(ctx context.Context, f *Factory, model string, disable []string) (dir string, g *models.Graph, p *plan.Plan, err error) {
	dir, src, err := resolveModel(ctx, f, model)
	if err != nil {
		return "", nil, nil, err
	}
	if g, err = models.Load(dir); err != nil {
		return "", nil, nil, err
	}
	p, err = plan.New(g, kernels.Default(), plan.Options{
		Source: src, Tool: "xpuinject " + Version, Disable: disable,
	})
	return dir, g, p, err
}

// buildPlan is loadPlan for callers that need only the plan.
func buildPlan(ctx context.Context, f *Factory, model string, disable []string) (*plan.Plan, error) {
	_, _, p, err := loadPlan(ctx, f, model, disable)
	return p, err
}

func planRun(ctx context.Context, f *Factory, o *planOptions) error {
	p, err := buildPlan(ctx, f, o.Model, o.Disable)
	if err != nil {
		return err
	}
	var b []byte
	switch o.Format {
	case "yaml":
		b, err = plan.MarshalYAML(p)
	case "json":
		b, err = plan.MarshalJSON(p)
	default:
		return writePlanTable(f.Out, p)
	}
	if err != nil {
		return err
	}
	_, err = f.Out.Write(b)
	return err
}

// writePlanTable prints one row per layer and a summary line.
func writePlanTable(w io.Writer, p *plan.Plan) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODULE\tKIND\tKERNEL\tTRANSFORMS\tREASON")
	replaced := 0
	for _, l := range p.Layers {
		if l.Kernel != plan.KernelKeep {
			replaced++
		}
		ts := strings.Join(l.Transforms, ",")
		if ts == "" {
			ts = "-"
		}
		reason := l.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Module, l.Kind, l.Kernel, ts, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d layers, %d replaced, %d kept (%s, %s)\n",
		len(p.Layers), replaced, len(p.Layers)-replaced, p.Arch, sourceString(p.Source))
	return err
}

func sourceString(s plan.Source) string {
	switch {
	case s.Repo != "" && s.Revision != "":
		return s.Repo + "@" + s.Revision
	case s.Repo != "":
		return s.Repo
	}
	return s.Path
}
