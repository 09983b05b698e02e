package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/kernels"
)

// kernelsOptions are the flags of `xpuinject kernels`.
type kernelsOptions struct {
	JSON bool
	GPU  string
}

func newKernelsCmd(f *Factory) *cobra.Command { return newKernelsCmdWith(f, nil) }

func newKernelsCmdWith(f *Factory, runF func(*kernelsOptions) error) *cobra.Command {
	o := &kernelsOptions{}
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "list the kernels, the layers they replace, their limits and the vendor routes",
		Long: `List the registry: every kernel, the layer kinds it replaces and the kernel-hub layer
classes that do it, what a layer must satisfy, then the vendor routes and kept targets
measured on --gpu (kernels/python/xpuinject_kernels/gpus/<gpu>.json) and how many tuned
launch configs it ships. --json prints the same as one JSON document.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := kernels.LoadGPU(o.GPU); err != nil {
				return &usageError{fmt.Errorf("--gpu: %w", err)}
			}
			if runF != nil {
				return runF(o)
			}
			reg, err := kernels.ForGPU(o.GPU)
			if err != nil {
				return err
			}
			return kernelsRun(f.Out, reg, o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the registry and the GPU's data as JSON")
	cmd.Flags().StringVar(&o.GPU, "gpu", kernels.DefaultGPU(), "GPU whose measured data to show (data: "+strings.Join(kernels.GPUs(), ", ")+")")
	return cmd
}

// kernelsJSON is `kernels --json`: the rows, and the GPU's data as its file holds it.
type kernelsJSON struct {
	Kernels []*kernels.Kernel `json:"kernels"`
	GPU     *kernels.GPU      `json:"gpu"`
	GPUFile string            `json:"gpu_file"` // "" when the GPU has no data
}

func kernelsRun(w io.Writer, reg *kernels.Registry, o *kernelsOptions) error {
	gpu := reg.GPU()
	if o.JSON {
		return writeJSON(w, kernelsJSON{Kernels: reg.Kernels(), GPU: gpu, GPUFile: gpu.File})
	}
	t := &textTable{header: []string{"KERNEL", "REPLACES", "LAYER CLASS"}}
	needsT := &textTable{header: []string{"KERNEL", "A LAYER NEEDS"}}
	var common []string
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
		var needs []string
		for _, c := range k.Constraints {
			needs = append(needs, c.Text)
		}
		for _, n := range k.Notes {
			needs = append(needs, "note: "+n.Text)
		}
		if len(k.Epilogues) > 0 {
			needs = append(needs, "epilogues "+strings.Join(k.Epilogues, ", "))
		}
		if len(k.Uses) > 0 {
			needs = append(needs, "uses "+strings.Join(k.Uses, ", "))
		}
		t.add(k.Name, strings.Join(replaces, ", "), strings.Join(layers, ", "))
		needsT.add(k.Name, dash(strings.Join(needs, "; ")))
		var weights []string
		for _, d := range k.WeightDTypes {
			weights = append(weights, string(d))
		}
		common = append(common, fmt.Sprintf("backends %s; computes in %s; weights from %s",
			strings.Join(k.Backends, ", "), strings.Join(k.ActDTypes, ", "), strings.Join(weights, ", ")))
	}
	if err := t.write(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := needsT.write(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(slices.Compact(slices.Clone(common))) == 1 {
		writeParagraph(w, "", "Every kernel: "+common[0]+".", 0)
	} else {
		for i, k := range reg.Kernels() {
			writeParagraph(w, "", k.Name+": "+common[i]+".", 2)
		}
	}
	fmt.Fprintln(w)
	if gpu.File == "" {
		writeParagraph(w, "", fmt.Sprintf("No measured data for GPU %q (have: %s): no vendor routes, and each kernel "+
			"class takes a config derived from its shape (--autotune tunes them).", gpu.Name, strings.Join(kernels.GPUs(), ", ")), 0)
		return nil
	}
	writeParagraph(w, "", fmt.Sprintf("Vendor routes measured on %s (kernels/%s/%s): the layer stays replaced, the "+
		"operation runs on the vendor path. Our speed is the vendor's time over ours.", gpu.Name, kernels.SourceDir, gpu.File), 0)
	rt := &textTable{header: []string{"KERNEL", "OPERATION", "VENDOR", "OUR SPEED"}}
	for _, r := range gpu.Routes {
		what := r.When()
		if r.KeepLayer {
			what += " (whole layer kept)"
		}
		rt.add(r.Kernel, what, r.Vendor, kernels.Ratios(r.Measured))
	}
	if err := rt.write(w); err != nil {
		return err
	}
	if len(gpu.Kept) > 0 {
		fmt.Fprintln(w)
		writeParagraph(w, "", "Targets missed but kept on our kernel (the paths a model can run instead are slower):", 0)
		for _, k := range gpu.Kept {
			writeParagraph(w, "  ", k.Note(gpu.File), 4)
		}
	}
	fmt.Fprintln(w)
	writeParagraph(w, "", fmt.Sprintf("Tuned launch configs: %d (a launch they cover skips autotuning).", len(gpu.Tuned)), 0)
	return nil
}
