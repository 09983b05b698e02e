package plan

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// ErrEdited marks a plan that is not what planning its model gives: a field edited
// by hand, an unknown kernel or layout. The Python side trusts plan.yaml, so eval
// refuses such a plan before any GPU work starts.
var ErrEdited = errors.New("inject: plan differs from the model's plan")

// planError is an ErrEdited whose message starts with the file.
type planError struct{ msg string }

func (e *planError) Error() string        { return e.msg }
func (e *planError) Is(target error) bool { return target == ErrEdited }

// knownTransforms are the transform names pack knows.
var knownTransforms = []string{TFoldBN, TFoldBNInput, TFoldConvBN, TConcatQKV, TConcatGateUp, TRopeDeinterleave, TAddOne,
	TStackExperts, TCastBF16, TCastFP16, TPrepackKMajor}

// CheckFields re-plans g with the options recorded in got (its dtype, GPU and disabled
// kernels; reg's rows) and
// reports every field of got that differs, each named by its place in file
// (`layers[3] (model.layers.0.input_layernorm): eps 0.5, re-planning the model gives
// 1e-06`). Unknown kernel names, layouts and transforms are named as such first. Free
// text (reason, vendor reasons), tool and source are provenance and not compared.
func CheckFields(got *Plan, g *models.Graph, reg *kernels.Registry, file string) error {
	if reg == nil {
		reg = kernels.Default()
	}
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for _, d := range got.Disable {
		if _, ok := reg.ByName(d); !ok {
			add("disable: %q is not a known kernel (known: %s)", d, strings.Join(reg.Names(), ", "))
		}
	}
	for i, l := range got.Layers {
		at := fmt.Sprintf("layers[%d] (%s)", i, l.Module)
		if _, ok := reg.ByName(l.Kernel); !ok && l.Kernel != KernelKeep {
			add("%s: kernel %q is not a known kernel (known: keep, %s)", at, l.Kernel, strings.Join(reg.Names(), ", "))
		}
		for j, o := range l.Outputs {
			oat := fmt.Sprintf("%s: outputs[%d] (%s)", at, j, o.Name)
			if o.Layout != LayoutRowMajor && o.Layout != LayoutKMajor {
				add("%s: layout %q is not a known layout (%s, %s)", oat, o.Layout, LayoutRowMajor, LayoutKMajor)
			}
			for _, t := range o.Transforms {
				if !slices.Contains(knownTransforms, t) {
					add("%s: transform %q is not a known transform (%s)", oat, t, strings.Join(knownTransforms, ", "))
				}
			}
		}
	}
	if got.GPU != "" {
		gpu, err := kernels.LoadGPU(got.GPU)
		if err != nil {
			add("gpu: %v", err)
		} else {
			reg = reg.WithGPU(gpu)
		}
	}
	if got.DType != DTypeBF16 && got.DType != DTypeFP16 {
		add("dtype %q: want %s or %s", got.DType, DTypeBF16, DTypeFP16)
	}
	if len(problems) == 0 {
		want, err := New(g, reg, Options{Source: got.Source, Tool: got.Tool, Disable: got.Disable, DType: got.DType})
		if err != nil {
			return &planError{fmt.Sprintf("%s: re-planning the model: %v", file, err)}
		}
		problems = diffPlans(got, want)
	}
	if len(problems) == 0 {
		return nil
	}
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
	}
	return &planError{file + ": " + strings.Join(problems, "; ")}
}

// diffPlans lists the fields of got that differ from want, the plan re-planning gives.
func diffPlans(got, want *Plan) []string {
	var out []string
	d := func(at, field string, g, w any) {
		if fmt.Sprint(g) != fmt.Sprint(w) {
			if at != "" {
				at += ": "
			}
			out = append(out, fmt.Sprintf("%s%s %s, re-planning the model gives %s", at, field, show(g), show(w)))
		}
	}
	d("", "arch", got.Arch, want.Arch)
	d("", "backends", got.Backends, want.Backends)
	d("", "dtype", got.DType, want.DType)
	d("", "gpu", got.GPU, want.GPU)
	d("", "disable", got.Disable, want.Disable)
	if len(got.Layers) != len(want.Layers) {
		return append(out, fmt.Sprintf("%d layers, re-planning the model gives %d", len(got.Layers), len(want.Layers)))
	}
	for i := range got.Layers {
		g, w := &got.Layers[i], &want.Layers[i]
		at := fmt.Sprintf("layers[%d] (%s)", i, w.Module)
		d(at, "module", g.Module, w.Module)
		d(at, "kind", g.Kind, w.Kind)
		d(at, "class", g.Class, w.Class)
		d(at, "kernel", g.Kernel, w.Kernel)
		d(at, "layer", g.Layer, w.Layer)
		d(at, "transforms", g.Transforms, w.Transforms)
		d(at, "tensors", sortedMap(g.Tensors), sortedMap(w.Tensors))
		d(at, "dims", sortedMap(g.Dims), sortedMap(w.Dims))
		d(at, "eps", g.Eps, w.Eps)
		if len(g.Bindings) != len(w.Bindings) {
			out = append(out, fmt.Sprintf("%s: %d bindings, re-planning the model gives %d", at, len(g.Bindings), len(w.Bindings)))
		} else {
			for j := range g.Bindings {
				gb, wb := &g.Bindings[j], &w.Bindings[j]
				bat := fmt.Sprintf("%s: bindings[%d] (%s)", at, j, wb.Module)
				d(bat, "module", gb.Module, wb.Module)
				d(bat, "class", gb.Class, wb.Class)
				d(bat, "layer", gb.Layer, wb.Layer)
				d(bat, "reads", gb.Reads, wb.Reads)
				d(bat, "vendor", gb.Vendor, wb.Vendor)
			}
		}
		if len(g.Outputs) != len(w.Outputs) {
			out = append(out, fmt.Sprintf("%s: %d outputs, re-planning the model gives %d", at, len(g.Outputs), len(w.Outputs)))
			continue
		}
		for j := range g.Outputs {
			go_, wo := &g.Outputs[j], &w.Outputs[j]
			oat := fmt.Sprintf("%s: outputs[%d] (%s)", at, j, wo.Name)
			d(oat, "name", go_.Name, wo.Name)
			d(oat, "role", go_.Role, wo.Role)
			d(oat, "attr", go_.Attr, wo.Attr)
			d(oat, "sources", go_.Sources, wo.Sources)
			d(oat, "transforms", go_.Transforms, wo.Transforms)
			d(oat, "shape", go_.Shape, wo.Shape)
			d(oat, "dtype", go_.DType, wo.DType)
			d(oat, "layout", go_.Layout, wo.Layout)
			d(oat, "split", go_.Split, wo.Split)
		}
	}
	return out
}

// show renders a plan value as it reads in plan.yaml.
func show(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case float64:
		return fmt.Sprintf("%g", x)
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	}
	return strings.ReplaceAll(fmt.Sprint(v), " ", ", ")
}

// sortedMap renders a map with sorted keys ("{a: 1, b: 2}"), so two equal maps print
// equal.
func sortedMap[V any](m map[string]V) string {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:%v", k, m[k])
	}
	b.WriteString("}")
	return b.String()
}
