package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/harness"
	"github.com/xpuinject/xpuinject/inject/outdir"
)

// reportOptions are the flags and argument of `xpuinject report`.
type reportOptions struct {
	EvalJSON string
	Out      string
	JSON     bool
}

// reportJSON is `report --json`: what was written.
type reportJSON struct {
	Eval   string   `json:"eval"`
	Report string   `json:"report"`
	Plots  []string `json:"plots"`
}

func newReportCmd(f *Factory) *cobra.Command {
	o := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report EVAL_JSON --out DIR",
		Short: "render an eval's report.md and plots again from its eval.json",
		Long: `Render report.md, layers.png and latency.png from an eval.json that an earlier eval wrote,
into a new eval folder (DIR) with a copy of the eval.json. For results brought back from
another machine without their report, or rendered by a newer xpuinject. DIR may be an
earlier eval folder, which is replaced; it must not hold EVAL_JSON.`,
		Example: "  xpuinject report gpu-results/eval.json --out gpu-results/eval",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.EvalJSON = args[0]
			if o.Out == "" {
				return &usageError{fmt.Errorf("--out: required (the folder to write the report into)")}
			}
			return reportRun(f, o)
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "eval folder to write (created; an earlier eval folder is replaced)")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print what was written as one JSON document")
	return cmd
}

func reportRun(f *Factory, o *reportOptions) error {
	b, err := os.ReadFile(o.EvalJSON)
	if err != nil {
		return &usageError{fmt.Errorf("EVAL_JSON: %w", err)}
	}
	res, err := harness.ParseResult(b, o.EvalJSON)
	if err != nil {
		return &usageError{fmt.Errorf("EVAL_JSON: %w", err)}
	}
	tx, err := outdir.Begin(o.Out, outdir.Options{Kind: outdir.KindEval, Tool: tool(), Replace: true,
		Inputs: []outdir.Input{{Path: o.EvalJSON, What: "EVAL_JSON"}}})
	if err != nil {
		return err
	}
	defer tx.Abort() // nothing once committed
	if err := tx.WriteFile("eval.json", b); err != nil {
		return err
	}
	files, err := harness.WriteReport(res, tx)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	written := reportJSON{Eval: filepath.Join(o.Out, "eval.json"), Report: filepath.Join(o.Out, files.Markdown), Plots: []string{}}
	for _, p := range files.Plots {
		written.Plots = append(written.Plots, filepath.Join(o.Out, p))
	}
	if o.JSON {
		return writeJSON(f.Out, written)
	}
	fmt.Fprintf(f.Out, "report -> %s\n", written.Report)
	for _, p := range written.Plots {
		fmt.Fprintf(f.Out, "plot   -> %s\n", p)
	}
	return nil
}
