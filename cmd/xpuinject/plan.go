package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// planOptions are the flags and argument of `xpuinject plan`.
type planOptions struct {
	Model string
	JSON  bool // the plan as JSON
	YAML  bool // the plan as plan.yaml
	Plan  planFlags
}

// planFlags choose how a model is planned; plan, pack, package and the pipeline share them.
type planFlags struct {
	Disable []string // kernel names
	GPU     string   // gpus/<name>.json whose routes the plan uses; "" the default
	DType   string   // auto, bf16 or fp16
}

func addPlanFlags(cmd *cobra.Command, p *planFlags) {
	fl := cmd.Flags()
	fl.StringSliceVar(&p.Disable, "disable", nil, "kernels not to use, comma-separated (see 'xpuinject kernels')")
	fl.StringVar(&p.GPU, "gpu", kernels.DefaultGPU(), "GPU whose measured vendor routes the plan uses (data: "+
		strings.Join(kernels.GPUs(), ", ")+"; another name plans without vendor routes)")
	fl.StringVar(&p.DType, "dtype", plan.DefaultDType, "what the injected model runs in: bf16, fp16, or auto (the checkpoint's 16-bit type, bf16 for F32)")
}

// check validates the planning flags before any work.
func (p *planFlags) check() error {
	if err := checkDisable(p.Disable); err != nil {
		return err
	}
	if !slices.Contains([]string{plan.DTypeAuto, plan.DTypeBF16, plan.DTypeFP16}, p.DType) {
		return &usageError{fmt.Errorf("--dtype %q: want auto, bf16 or fp16", p.DType)}
	}
	if _, err := kernels.LoadGPU(p.GPU); err != nil {
		return &usageError{fmt.Errorf("--gpu: %w", err)}
	}
	return nil
}

func newPlanCmd(f *Factory) *cobra.Command { return newPlanCmdWith(f, nil) }

// newPlanCmdWith takes runF so tests can capture the parsed options.
func newPlanCmdWith(f *Factory, runF func(context.Context, *planOptions) error) *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan MODEL",
		Short: "print which kernel replaces each layer, and the weight transforms",
		Long: `Print the layer -> kernel plan of a model: for every layer the kernel that replaces
it or "keep" with the reason, and the weight transforms (fold-bn, concat-qkv, cast-bf16,
prepack-kmajor, ...). Layers alike but for their index print as one row
(model.layers.{0-15}.mlp); long reasons are footnotes. --yaml prints plan.yaml, the file
pack writes, with the tensors the packed checkpoint will hold; --json the same as JSON
(schema: inject/PLAN.md).

The plan uses the vendor routes measured on --gpu (kernels/python/xpuinject_kernels/gpus/);
a GPU without measured data plans every layer on our kernels.

MODEL is a local folder with config.json and safetensors, a preset name, or
org/name[@revision]: read from the Hugging Face cache, downloaded first when it is not there.
Only config.json and the safetensors headers are read, never tensor data.

` + presetNames() + `.`,
		Example: `  xpuinject plan testdata/fixtures/llama-tiny
  xpuinject plan llama --yaml > plan.yaml
  xpuinject plan Qwen/Qwen2.5-0.5B --disable add-rmsnorm,attention-prefill --dtype fp16`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Model = args[0]
			if o.JSON && o.YAML {
				return &usageError{fmt.Errorf("--json and --yaml exclude each other")}
			}
			if err := o.Plan.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return planRun(cmd.Context(), f, o)
		},
	}
	cmd.Flags().BoolVar(&o.JSON, "json", false, "print the plan as JSON")
	cmd.Flags().BoolVar(&o.YAML, "yaml", false, "print the plan as plan.yaml")
	addPlanFlags(cmd, &o.Plan)
	return cmd
}

// checkDisable validates --disable: every name must be a registry kernel.
func checkDisable(disable []string) error {
	reg := kernels.Default()
	for _, d := range disable {
		if _, ok := reg.ByName(d); !ok {
			return &usageError{fmt.Errorf("--disable %q: no such kernel\n(kernels: %s)", d, strings.Join(reg.Names(), ", "))}
		}
	}
	return nil
}

// loadPlan resolves MODEL, reads its tensor headers and plans it: the first steps of
// plan, pack, package and the whole pipeline.
func loadPlan(ctx context.Context, f *Factory, model string, pf planFlags) (dir string, g *models.Graph, p *plan.Plan, err error) {
	dir, src, err := resolveModel(ctx, f, model)
	if err != nil {
		return "", nil, nil, err
	}
	if g, err = models.Load(dir); err != nil {
		return "", nil, nil, err
	}
	reg, err := kernels.ForGPU(pf.GPU)
	if err != nil {
		return "", nil, nil, err
	}
	if reg.GPU().File == "" {
		fmt.Fprintf(f.ErrOut, "note: no measured data for GPU %q (have: %s): no vendor routes; kernels take shape-derived configs\n",
			reg.GPU().Name, strings.Join(kernels.GPUs(), ", "))
	}
	p, err = plan.New(g, reg, plan.Options{Source: src, Tool: "xpuinject " + Version, Disable: pf.Disable, DType: pf.DType})
	return dir, g, p, err
}

// buildPlan is loadPlan for callers that need only the plan.
func buildPlan(ctx context.Context, f *Factory, model string, pf planFlags) (*plan.Plan, error) {
	_, _, p, err := loadPlan(ctx, f, model, pf)
	return p, err
}

func planRun(ctx context.Context, f *Factory, o *planOptions) error {
	p, err := buildPlan(ctx, f, o.Model, o.Plan)
	if err != nil {
		return err
	}
	var b []byte
	switch {
	case o.YAML:
		b, err = plan.MarshalYAML(p)
	case o.JSON:
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

// writePlanTable prints the plan for people: one row per group of layers alike but for
// their indices, the reasons as footnotes, a summary line; every line fits outputWidth.
func writePlanTable(w io.Writer, p *plan.Plan) error {
	t := &textTable{header: []string{"MODULE", "N", "KIND", "KERNEL", "TRANSFORMS", "NOTE"}, shrink: []int{4}}
	var notes []string
	for _, g := range groupLayers(p.Layers) {
		l := g.layers[0]
		note := ""
		if l.Reason != "" {
			i := slices.Index(notes, l.Reason)
			if i < 0 {
				notes = append(notes, l.Reason)
				i = len(notes) - 1
			}
			note = fmt.Sprintf("[%d]", i+1)
		}
		t.add(g.pattern, fmt.Sprint(len(g.layers)), l.Kind, l.Kernel, dash(strings.Join(l.Transforms, ", ")), note)
	}
	if err := t.write(w); err != nil {
		return err
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}
	for i, n := range notes {
		ref := fmt.Sprintf("[%d] ", i+1)
		writeParagraph(w, ref, n, len(ref))
	}
	fmt.Fprintln(w)
	writeParagraph(w, "", fmt.Sprintf("%s %s: %s; dtype %s; vendor routes measured on %s.", p.Arch, sourceString(p.Source), p.Counts(),
		p.DType, dash(p.GPU)), 0)
	return nil
}

// layerGroup is layers with the same kind, kernel, transforms and reason whose module paths
// differ only in numeric parts; pattern names them all.
type layerGroup struct {
	pattern string
	layers  []plan.LayerPlan
}

// indexPart is a module path component that is an index ("3") or ends in one after an
// underscore ("embedding_layer_3").
var indexPart = regexp.MustCompile(`^((?:.*_)?)(\d+)$`)

// groupLayers groups p's layers in order of first appearance. A pattern spells each
// varying index as a set ("model.layers.{0-15}.mlp", "stages.{0,2}") when those sets make
// exactly the group's modules, else as "*".
func groupLayers(layers []plan.LayerPlan) []layerGroup {
	var out []layerGroup
	at := map[string]int{}
	for _, l := range layers {
		parts := strings.Split(l.Module, ".")
		for i, c := range parts {
			parts[i] = indexPart.ReplaceAllString(c, "${1}*")
		}
		shape := strings.Join(parts, ".")
		key := strings.Join([]string{shape, l.Kind, l.Kernel, strings.Join(l.Transforms, ","), l.Reason}, "\x00")
		if i, ok := at[key]; ok {
			out[i].layers = append(out[i].layers, l)
			continue
		}
		at[key] = len(out)
		out = append(out, layerGroup{pattern: shape, layers: []plan.LayerPlan{l}})
	}
	for i := range out {
		out[i].pattern = modulePattern(out[i].pattern, out[i].layers)
	}
	return out
}

// modulePattern fills the "*" of shape with each position's indices when their product is
// exactly the modules (so the pattern claims no module that is not there).
func modulePattern(shape string, layers []plan.LayerPlan) string {
	if len(layers) == 1 {
		return layers[0].Module
	}
	parts := strings.Split(shape, ".")
	sets := map[int][]int{}
	for _, l := range layers {
		for i, c := range strings.Split(l.Module, ".") {
			if strings.HasSuffix(parts[i], "*") {
				n, _ := strconv.Atoi(indexPart.FindStringSubmatch(c)[2])
				if !slices.Contains(sets[i], n) {
					sets[i] = append(sets[i], n)
				}
			}
		}
	}
	product := 1
	for _, v := range sets {
		product *= len(v)
	}
	if product != len(layers) {
		return shape
	}
	for i, v := range sets {
		parts[i] = strings.TrimSuffix(parts[i], "*") + indexSet(v)
	}
	return strings.Join(parts, ".")
}

// indexSet writes sorted indices as "7", "{0-15}" or "{0,2,5-7}".
func indexSet(v []int) string {
	slices.Sort(v)
	if len(v) == 1 {
		return strconv.Itoa(v[0])
	}
	var runs []string
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if j > i {
			runs = append(runs, fmt.Sprintf("%d-%d", v[i], v[j]))
		} else {
			runs = append(runs, strconv.Itoa(v[i]))
		}
		i = j + 1
	}
	return "{" + strings.Join(runs, ",") + "}"
}

// sourceString names a plan's source: org/name@revision, or the folder (relative to the
// working directory when it is inside it).
func sourceString(s plan.Source) string {
	switch {
	case s.Repo != "" && s.Revision != "":
		return s.Repo + "@" + s.Revision
	case s.Repo != "":
		return s.Repo
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, s.Path); err == nil && filepath.IsLocal(rel) {
			return rel
		}
	}
	return s.Path
}
