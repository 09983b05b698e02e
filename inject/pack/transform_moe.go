package pack

import (
	"fmt"
	"slices"

	"github.com/xpuinject/xpuinject/inject/plan"
)

// newStackRecipe checks a stack-experts output: Shape [experts, ...], its sources split
// evenly into one group per expert (in expert order), and the remaining transforms valid
// for each group on its own. Each expert's slice is its own recipe, written in order, so
// packing holds one slice at a time.
func newStackRecipe(lp *plan.LayerPlan, o plan.TensorPlan, src func(name string) (srcInfo, bool)) (*recipe, error) {
	r := &recipe{Out: o, Layer: lp.Module, Eps: lp.Eps, Op: opStack}
	if len(o.Shape) < 2 || o.Shape[0] <= 0 {
		return nil, r.errf("stack-experts wants a shape [experts, ...], got %v", o.Shape)
	}
	n := o.Shape[0]
	if int64(len(o.Sources))%n != 0 || len(o.Sources) == 0 {
		return nil, r.errf("stack-experts over %d experts, but %d sources do not split into one group each", n, len(o.Sources))
	}
	per := int64(len(o.Sources)) / n
	rest := o.Transforms[1:]
	if slices.Contains(rest, plan.TStackExperts) {
		return nil, r.errf("transforms %v: stack-experts appears twice", o.Transforms)
	}
	for e := int64(0); e < n; e++ {
		sub := o
		sub.Name = fmt.Sprintf("%s[%d]", o.Name, e)
		sub.Sources = o.Sources[e*per : (e+1)*per]
		sub.Transforms = rest
		sub.Shape = o.Shape[1:]
		s, err := newRecipe(lp, sub, src)
		if err != nil {
			return nil, err
		}
		if e > 0 && s.outBytes() != r.Subs[0].outBytes() {
			return nil, r.errf("expert %d's slice is %d bytes, expert 0's %d", e, s.outBytes(), r.Subs[0].outBytes())
		}
		r.Subs = append(r.Subs, s)
	}
	s0 := r.Subs[0]
	r.InDT, r.OutDT, r.CastTo = s0.InDT, s0.OutDT, s0.CastTo
	r.Rows, r.Cols = n, s0.Rows*s0.Cols
	r.viewShape = slices.Clone(o.Shape)
	return r, nil
}
