package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/kernels"
)

// kernelsOptions are the flags of `xpuinject kernels`.
type kernelsOptions struct {
	JSON  bool
	GPU   string
	Tuned bool
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
launch configs it ships. --tuned lists those instead, one row per problem class, with the
tuned config's time beside the heuristic config's and the autotuner's pick's. --json prints
the same as one JSON document.`,
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
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the registry and the GPU's data as JSON (with --tuned: the tuned configs)")
	cmd.Flags().BoolVar(&o.Tuned, "tuned", false, "list the GPU's tuned launch configs with their measured times")
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
	if o.Tuned {
		return tunedRun(w, gpu, o.JSON)
	}
	if o.JSON {
		return writeJSON(w, kernelsJSON{Kernels: reg.Kernels(), GPU: gpu, GPUFile: gpu.File})
	}
	t := &textTable{header: []string{"KERNEL", "REPLACES", "LAYER CLASS"}}
	needsT := &textTable{header: []string{"KERNEL", "A LAYER NEEDS"}}
	var common []string
	for _, k := range reg.Kernels() {
		var replaces []string
		for _, kind := range k.Replaces {
			replaces = append(replaces, string(kind))
		}
		layers := k.LayerClasses()
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
	writeParagraph(w, "", "Decoder layers ("+strings.Join(kernels.DecoderLayers, ", ")+") run a decoder layer's "+
		"replaced children in one forward, so that adds and norms share the launches around them.", 0)
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
	if len(gpu.Tuned) == 0 {
		writeParagraph(w, "", "Tuned launch configs: none (each kernel class takes a config derived from its shape).", 0)
		return nil
	}
	writeParagraph(w, "", fmt.Sprintf("Tuned launch configs: %d (a launch they cover skips autotuning); %s; "+
		"`xpuinject kernels --tuned` lists them.", len(gpu.Tuned), tunedSummary(gpu)), 0)
	return nil
}

// tunedSummary counts the tuned configs measured against the autotuner's pick and the
// heuristic config, and those slower ("105 timed against the autotuner's pick, 134 against
// the heuristic config, none slower").
func tunedSummary(gpu *kernels.GPU) string {
	var vsAutotune, vsHeuristic, slowerAutotune, slowerHeuristic int
	for _, t := range gpu.Tuned {
		tt, _ := t.Times() // kernels.ParseGPU read it without error
		if tt.US != nil && tt.AutotuneUS != nil {
			vsAutotune++
		}
		if tt.US != nil && tt.HeuristicUS != nil {
			vsHeuristic++
		}
		h, a := tt.Slower()
		slowerHeuristic += b2i(h)
		slowerAutotune += b2i(a)
	}
	s := fmt.Sprintf("%d timed against the autotuner's pick, %d against the heuristic config", vsAutotune, vsHeuristic)
	switch {
	case slowerAutotune+slowerHeuristic == 0:
		return s + ", none slower"
	case slowerHeuristic == 0:
		return s + fmt.Sprintf(", %d slower than the autotuner's pick", slowerAutotune)
	case slowerAutotune == 0:
		return s + fmt.Sprintf(", %d slower than the heuristic config", slowerHeuristic)
	}
	return s + fmt.Sprintf(", %d slower than the autotuner's pick and %d than the heuristic config",
		slowerAutotune, slowerHeuristic)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tunedJSON is `kernels --tuned --json`: the GPU's tuned configs in the table's order, with
// their times in µs (null: not measured).
type tunedJSON struct {
	GPU     string       `json:"gpu"`
	GPUFile string       `json:"gpu_file"` // "" when the GPU has no data
	Tuned   []tunedEntry `json:"tuned"`
}

type tunedEntry struct {
	Kernel string         `json:"kernel"`
	Key    map[string]any `json:"key"`
	Config map[string]int `json:"config"`
	kernels.TunedTimes
	kernels.Stamp
}

// sortedTuned is the GPU's tuned entries by kernel, then by key fields in the order the
// launcher passes them (a field a key leaves out first: it matches any value), stably.
func sortedTuned(gpu *kernels.GPU) []kernels.Tuned {
	out := slices.Clone(gpu.Tuned)
	slices.SortStableFunc(out, func(a, b kernels.Tuned) int {
		if c := strings.Compare(a.Kernel, b.Kernel); c != 0 {
			return c
		}
		for _, f := range kernels.TunedKeyFields[a.Kernel] {
			if c := compareKeyValue(a.Key[f], b.Key[f]); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}

// compareKeyValue orders key values as JSON decodes them: absent, then booleans, numbers and
// strings, each in their own order.
func compareKeyValue(a, b any) int {
	rank := func(v any) int {
		switch v.(type) {
		case nil:
			return 0
		case bool:
			return 1
		case float64:
			return 2
		case string:
			return 3
		}
		return 4
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	switch x := a.(type) {
	case bool:
		return cmp.Compare(b2i(x), b2i(b.(bool)))
	case float64:
		return cmp.Compare(x, b.(float64))
	case string:
		return strings.Compare(x, b.(string))
	}
	return 0
}

func keyValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "any"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// tunedRun prints `kernels --tuned`: per tuned launcher, a table of its problem classes (one
// column per key field), the config and the times, then the result files they come from.
func tunedRun(w io.Writer, gpu *kernels.GPU, asJSON bool) error {
	entries := sortedTuned(gpu)
	if asJSON {
		doc := tunedJSON{GPU: gpu.Name, GPUFile: gpu.File, Tuned: []tunedEntry{}}
		for _, t := range entries {
			tt, _ := t.Times()
			doc.Tuned = append(doc.Tuned, tunedEntry{Kernel: t.Kernel, Key: t.Key, Config: t.Config, TunedTimes: tt, Stamp: t.Stamp})
		}
		return writeJSON(w, doc)
	}
	if len(entries) == 0 {
		writeParagraph(w, "", fmt.Sprintf("No tuned launch configs for GPU %q (have: %s): each kernel class takes a "+
			"config derived from its shape (--autotune tunes them).", gpu.Name, strings.Join(kernels.GPUs(), ", ")), 0)
		return nil
	}
	writeParagraph(w, "", fmt.Sprintf("Tuned launch configs on %s (kernels/%s/%s), one row per problem class: the "+
		"tuned config's time in µs beside the class's heuristic config's and the autotuner's pick's, with their time "+
		"over the tuned one's (1.00x or more: the tuned config is as fast or faster; -: not measured).",
		gpu.Name, kernels.SourceDir, gpu.File), 0)
	var sources []kernels.Stamp
	for start := 0; start < len(entries); {
		kernel := entries[start].Kernel
		end := start
		for end < len(entries) && entries[end].Kernel == kernel {
			end++
		}
		group := entries[start:end]
		start = end
		var fields []string
		for _, f := range kernels.TunedKeyFields[kernel] {
			if slices.ContainsFunc(group, func(t kernels.Tuned) bool { _, ok := t.Key[f]; return ok }) {
				fields = append(fields, f)
			}
		}
		fmt.Fprintln(w)
		classes := fmt.Sprintf("%d problem classes", len(group))
		if len(group) == 1 {
			classes = "1 problem class"
		}
		configIs := strings.Join(kernels.TunedConfigKeys[kernel], ", ")
		var on []string // the switches some entry of the group sets
		for _, f := range kernels.TunedConfigFlags[kernel] {
			if slices.ContainsFunc(group, func(t kernels.Tuned) bool { return t.Config[f] == 1 }) {
				on = append(on, "+"+f)
			}
		}
		if len(on) > 0 {
			configIs += " (" + strings.Join(on, ", ") + " where set)"
		}
		writeParagraph(w, "", fmt.Sprintf("%s, %s; CONFIG is %s", kernel, classes, configIs), 2)
		header := []string{}
		for _, f := range fields {
			header = append(header, strings.ToUpper(f))
		}
		t := &textTable{header: append(header, "CONFIG", "TUNED", "HEURISTIC", "AUTOTUNE", "FROM")}
		for _, e := range group {
			var row []string
			for _, f := range fields {
				row = append(row, keyValue(e.Key[f]))
			}
			var config []string
			for _, k := range kernels.TunedConfigKeys[kernel] {
				config = append(config, strconv.Itoa(e.Config[k]))
			}
			cell := strings.Join(config, "/")
			for _, k := range kernels.TunedConfigFlags[kernel] {
				if e.Config[k] == 1 {
					cell += "+" + k
				}
			}
			tt, _ := e.Times()
			src := slices.Index(sources, e.Stamp)
			if src < 0 {
				sources = append(sources, e.Stamp)
				src = len(sources) - 1
			}
			t.add(append(row, cell, usCell(tt.US, nil), usCell(tt.HeuristicUS, tt.US),
				usCell(tt.AutotuneUS, tt.US), fmt.Sprintf("[%d]", src+1))...)
		}
		if err := t.write(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	for i, st := range sources {
		writeParagraph(w, "", fmt.Sprintf("[%d] %s, %s", i+1, st.Date, st.Source), 4)
	}
	if slices.ContainsFunc(entries, func(t kernels.Tuned) bool { return strings.HasPrefix(t.Kernel, "moe.") }) {
		writeParagraph(w, "", "The MoE launchers never autotune; their HEURISTIC is the config the launcher took by "+
			"itself in the sweep (benchmarks/bench_moe.py).", 0)
	}
	writeParagraph(w, "", fmt.Sprintf("Of %d: %s. --json has the commands.", len(entries), tunedSummary(gpu)), 0)
	return nil
}

// usCell is a time in µs, with other's over it after ("33.55 1.01x") when other is given.
func usCell(us, tuned *float64) string {
	switch {
	case us == nil:
		return "-"
	case tuned == nil:
		return fmt.Sprintf("%.2f", *us)
	}
	return fmt.Sprintf("%.2f %.2fx", *us, *us / *tuned)
}
