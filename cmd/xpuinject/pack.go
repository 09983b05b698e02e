package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/pack"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// packOptions are the flags and argument of `xpuinject pack`.
type packOptions struct {
	Model        string
	Out          string
	MaxShardSize string
	Plan         planFlags
	PlanFile     string // pack an existing plan.yaml instead of planning
	JSON         bool
}

func newPackCmd(f *Factory) *cobra.Command { return newPackCmdWith(f, nil) }

// newPackCmdWith takes runF so tests can capture the parsed options.
func newPackCmdWith(f *Factory, runF func(context.Context, *packOptions) error) *cobra.Command {
	o := &packOptions{}
	cmd := &cobra.Command{
		Use:   "pack MODEL --out DIR",
		Short: "write the folded, cast and pre-packed weights the plan asks for, and plan.yaml",
		Long: `Plan MODEL (as 'xpuinject plan' does) and write the packed checkpoint into DIR:
model.safetensors (or model-0000i-of-0000N.safetensors shards and
model.safetensors.index.json) holding exactly the plan's output tensors (BatchNorm
folded, q/k/v and gate/up concatenated, cast to the plan's dtype (bf16 or fp16), K-major
where a kernel reads [K, N]), and plan.yaml. The tensors of modules the plan keeps are
written too, cast to the plan's dtype (a kept embedding table, which a tied lm_head
reads, among them), so the checkpoint holds every weight; injection leaves those to the
model's own copy. Every shard's __metadata__ names the source, its sha256s, the
transforms, this tool's version and the plan's sha256. Tensors stream through in row
blocks: memory stays near the largest output tensor whatever the model size.

DIR is assembled aside and renamed into place when complete: an interrupted run leaves
an earlier pack in DIR as it was. An earlier pack is replaced; any other non-empty DIR,
a file, or a DIR holding or inside MODEL is refused.`,
		Example: `  xpuinject pack testdata/fixtures/llama-tiny --out /tmp/llama-packed
  xpuinject pack Qwen/Qwen2.5-0.5B --out packed --max-shard-size 2GB
  xpuinject pack llama --out packed --plan edited-plan.yaml`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Model = args[0]
			if o.Out == "" {
				return &usageError{fmt.Errorf("--out DIR is required")}
			}
			if _, err := pack.ParseSize(o.MaxShardSize); err != nil {
				return &usageError{fmt.Errorf("--max-shard-size: %w", err)}
			}
			if o.PlanFile != "" {
				for _, fl := range []string{"disable", "gpu", "dtype"} {
					if cmd.Flags().Changed(fl) {
						return &usageError{fmt.Errorf("--%s and --plan exclude each other (the plan file already says it)", fl)}
					}
				}
			}
			if err := o.Plan.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return packRun(cmd.Context(), f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Out, "out", "", "output folder (created if missing)")
	fl.StringVar(&o.MaxShardSize, "max-shard-size", "5GB", `largest shard: bytes, or with a unit ("500MB", "2GiB")`)
	fl.StringVar(&o.PlanFile, "plan", "", "pack this plan.yaml (e.g. an edited one) instead of planning MODEL")
	fl.BoolVar(&o.JSON, "json", false, "print what was written as JSON")
	addPlanFlags(cmd, &o.Plan)
	return cmd
}

func packRun(ctx context.Context, f *Factory, o *packOptions) error {
	maxShard, err := pack.ParseSize(o.MaxShardSize)
	if err != nil {
		return &usageError{err}
	}
	var ck *models.Checkpoint
	var pl *plan.Plan
	if o.PlanFile != "" {
		dir, _, err := resolveModel(ctx, f, o.Model)
		if err != nil {
			return err
		}
		b, err := models.ReadSmallFile(o.PlanFile)
		if err != nil {
			return fmt.Errorf("pack: --plan: %w", err)
		}
		if pl, err = plan.ParseYAML(b); err != nil {
			return fmt.Errorf("pack: --plan %s: %w", o.PlanFile, err)
		}
		if ck, err = models.Open(dir); err != nil {
			return err
		}
	} else {
		_, g, p, err := loadPlan(ctx, f, o.Model, o.Plan)
		if err != nil {
			return err
		}
		ck, pl = g.Checkpoint, p
	}
	prog := newPackProgress(f)
	var inputs []outdir.Input
	if o.PlanFile != "" {
		inputs = append(inputs, outdir.Input{Path: o.PlanFile, What: "the --plan file"})
	}
	res, err := pack.Write(ctx, ck, pl, o.Out, pack.Options{
		MaxShardSize: maxShard,
		Tool:         tool(),
		Progress:     prog.report,
		Inputs:       inputs,
	})
	prog.done()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(res.Dir)
	if err != nil {
		abs = res.Dir
	}
	if o.JSON {
		return writeJSON(f.Out, packSummary{Dir: abs, Files: res.Files, Tensors: res.Tensors, Bytes: res.OutputBytes,
			SourceBytes: res.InputBytes, PlanSHA256: res.PlanSHA256})
	}
	fmt.Fprintf(f.ErrOut, "packed %s\n", packedLine(res, pl))
	fmt.Fprintln(f.Out, abs)
	for _, name := range res.Files {
		fmt.Fprintln(f.Out, "  "+name)
	}
	return nil
}

// packSummary is pack's --json result.
type packSummary struct {
	Dir         string   `json:"dir"`
	Files       []string `json:"files"`
	Tensors     int      `json:"tensors"`
	Bytes       int64    `json:"bytes"`
	SourceBytes int64    `json:"source_bytes"`
	PlanSHA256  string   `json:"plan_sha256"`
}

// packedLine is how every command states a pack, counting tensors as the plan does:
// "97 packed tensors (1 of kept modules), 1.9 GB from 4.9 GB of source tensors".
func packedLine(res *pack.Result, pl *plan.Plan) string {
	c := pl.Counts()
	c.Tensors = res.Tensors
	return fmt.Sprintf("%s, %s from %s of source tensors", c.TensorsString(), models.HumanBytes(res.OutputBytes),
		models.HumanBytes(res.InputBytes))
}

// packProgress prints "[i/N] tensor (bytes)" on stderr: one updating line on a
// terminal, one line per tensor otherwise (logs).
type packProgress struct {
	f    *Factory
	last int
}

func newPackProgress(f *Factory) *packProgress { return &packProgress{f: f} }

func (p *packProgress) report(ev pack.Progress) {
	line := fmt.Sprintf("pack [%d/%d] %s  %s / %s", ev.Index, ev.Total, ev.Name, models.HumanBytes(ev.Bytes), models.HumanBytes(ev.TotalBytes))
	if p.f.IsTerminal {
		pad := ""
		if n := p.last - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		fmt.Fprint(p.f.ErrOut, "\r"+line+pad)
		p.last = len(line)
		return
	}
	fmt.Fprintln(p.f.ErrOut, line)
}

func (p *packProgress) done() {
	if p.f.IsTerminal && p.last > 0 {
		fmt.Fprintln(p.f.ErrOut)
	}
}
