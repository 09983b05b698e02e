package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/kernels"
)

// kernelsOptions are the flags of `xpuinject kernels`.
type kernelsOptions struct {
	JSON bool
}

func newKernelsCmd(f *Factory) *cobra.Command { return newKernelsCmdWith(f, nil) }

func newKernelsCmdWith(f *Factory, runF func(*kernelsOptions) error) *cobra.Command {
	o := &kernelsOptions{}
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "list the kernels, the layers they replace, backends, dtypes and constraints",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return kernelsRun(f.Out, kernels.Default(), o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the registry as JSON")
	return cmd
}

func kernelsRun(w io.Writer, reg *kernels.Registry, o *kernelsOptions) error {
	if o.JSON {
		b, err := json.MarshalIndent(reg.Kernels(), "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREPLACES\tLAYER\tBACKENDS\tDTYPES\tCONSTRAINTS")
	for _, k := range reg.Kernels() {
		var replaces, layers []string
		for _, kind := range k.Replaces {
			replaces = append(replaces, string(kind))
			if c := k.LayerClass(kind); c != "" && !slices.Contains(layers, c) {
				layers = append(layers, c)
			}
		}
		if k.Function != "" {
			layers = append(layers, k.Function+"()")
		}
		var weights []string
		for _, d := range k.WeightDTypes {
			weights = append(weights, string(d))
		}
		var cons []string
		for _, c := range k.Constraints {
			cons = append(cons, c.Text)
		}
		for _, n := range k.Notes {
			cons = append(cons, "note: "+n.Text)
		}
		if len(k.Uses) > 0 {
			cons = append(cons, "uses "+strings.Join(k.Uses, ", "))
		}

		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Name, strings.Join(replaces, ","), strings.Join(layers, ","),
			strings.Join(k.Backends, ","), strings.Join(k.ActDTypes, ",")+" <- "+strings.Join(weights, ","),
			dash(strings.Join(cons, "; ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Measured vendor routes: sub-operations a replaced layer hands to cuBLAS/SDPA.
	first := true
	for _, k := range reg.Kernels() {
		for _, r := range k.VendorOps {
			if first {
				fmt.Fprintln(w, "\nvendor routes (the layer stays replaced; this operation runs on the vendor path):")
				first = false
			}
			fmt.Fprintf(w, "  %s: %s: %s\n", k.Name, r.When, r.Measured)
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
