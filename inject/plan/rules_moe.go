package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// The mixture-of-experts rule: the whole sparse block (router and experts) is one layer,
// replaced by the fused MoE kernel's layer class. The per-expert 2D tensors are stacked
// into one K-major tensor per projection, as the kernel reads them: gate_up [experts,
// hidden, 2·intermediate] (each expert's gate then up), down [experts, intermediate,
// hidden]; the router weight is K-major [hidden, experts].

// layerSparseMoE is the kernel-hub layer class bound to an MoE block, layerMoEDecoder the one
// of a decoder layer whose forward takes Mixtral's parameter order.
const (
	layerSparseMoE       = "SparseMoE"
	layerSharedExpertMoE = "SharedExpertMoE"
	layerMoEDecoder      = "MoEDecoderLayer"
	// layerRouterMoE is SparseMoE on a block whose router child is `router` (GraniteMoE's),
	// layerScaledMoEDecoder the decoder layer around it, each branch scaled before its add.
	layerRouterMoE        = "RouterMoE"
	layerScaledMoEDecoder = "ScaledMoEDecoderLayer"
)

// sharedRoles are a block's shared-expert tensors (Qwen2-MoE), read beside the routed ones.
var sharedRoles = []string{"shared_expert.gate_proj.weight", "shared_expert.up_proj.weight",
	"shared_expert.down_proj.weight", "shared_expert_gate.weight"}

// moeRouters are the routing rules the MoE kernel computes (models' Router* values).
var moeRouters = []string{models.RouterSoftmaxTopK, models.RouterSoftmaxTopKNorm, models.RouterSoftmaxTopKNormFP32}

func moeRoles(experts int64) []string {
	roles := []string{"gate.weight"}
	for e := int64(0); e < experts; e++ {
		for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
			roles = append(roles, fmt.Sprintf("experts.%d.%s.weight", e, p))
		}
	}
	return roles
}

func (p *planner) moe(l models.Layer, lp *LayerPlan) error {
	d := l.Dims
	hidden, inter, experts, topK := d["hidden"], d["intermediate"], d["experts"], d["top_k"]
	if hidden <= 0 || inter <= 0 || experts <= 0 || topK <= 0 || topK > experts {
		return fmt.Errorf("%w: layer %s: MoE dims hidden=%d intermediate=%d experts=%d top_k=%d",
			ErrCannotPlan, l.Module, hidden, inter, experts, topK)
	}
	roles := moeRoles(experts)
	shared := d["shared_intermediate"]
	if shared > 0 {
		roles = append(roles, sharedRoles...)
	}
	if extra := unknownRoles(l, roles, nil); len(extra) > 0 {
		return p.keep(l, lp, fmt.Sprintf("MoE block has tensors the %s layer does not read (%s); stock path",
			layerSparseMoE, strings.Join(extra, ", ")))
	}
	if err := p.needRoles(l, roles); err != nil {
		return err
	}
	if err := p.wantShape(l, "gate.weight", experts, hidden); err != nil {
		return err
	}
	for e := int64(0); e < experts; e++ {
		pre := fmt.Sprintf("experts.%d.", e)
		for _, c := range []struct {
			role string
			want []int64
		}{
			{pre + "gate_proj.weight", []int64{inter, hidden}}, {pre + "up_proj.weight", []int64{inter, hidden}},
			{pre + "down_proj.weight", []int64{hidden, inter}},
		} {
			if err := p.wantShape(l, c.role, c.want...); err != nil {
				return err
			}
		}
	}
	if shared > 0 {
		for _, c := range []struct {
			role string
			want []int64
		}{
			{sharedRoles[0], []int64{shared, hidden}}, {sharedRoles[1], []int64{shared, hidden}},
			{sharedRoles[2], []int64{hidden, shared}}, {sharedRoles[3], []int64{1, hidden}},
		} {
			if err := p.wantShape(l, c.role, c.want...); err != nil {
				return err
			}
		}
	}
	if !slices.Contains(moeRouters, l.Router) {
		return p.keep(l, lp, fmt.Sprintf("router %q is not one the MoE kernel computes (%s); stock path",
			l.Router, strings.Join(moeRouters, ", ")))
	}
	k, note, why := p.choose(l, "moe")
	if k == nil {
		return p.keep(l, lp, why)
	}
	twoI, err := sum(inter, inter)
	if err != nil {
		return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
	}
	t, m := l.Tensors, l.Module
	var gateUp, down []string
	for e := int64(0); e < experts; e++ {
		pre := fmt.Sprintf("experts.%d.", e)
		gateUp = append(gateUp, t[pre+"gate_proj.weight"], t[pre+"up_proj.weight"])
		down = append(down, t[pre+"down_proj.weight"])
	}
	layer := k.LayerClass(l.Kind)
	switch {
	case shared > 0:
		layer = layerSharedExpertMoE
	case kernels.LayerReplaces(layerRouterMoE, l.Class):
		layer = layerRouterMoE
	}
	router := p.out(m+".router.weight", "", kernels.PackedAttr(layer, "router_weight"), LayoutKMajor,
		[]int64{hidden, experts}, nil, t["gate.weight"])
	gu := p.stacked(m+".gate_up_proj.weight", kernels.PackedAttr(layer, "gate_up_weight"),
		[]int64{experts, hidden, twoI}, []int64{inter, inter}, gateUp)
	gu.Transforms = slices.Insert(gu.Transforms, 1, TConcatGateUp)
	dn := p.stacked(m+".down_proj.weight", kernels.PackedAttr(layer, "down_weight"),
		[]int64{experts, inter, hidden}, nil, down)
	lp.Outputs = []TensorPlan{router, gu, dn}
	what := ""
	var extra []string
	if shared > 0 {
		twoS, err := sum(shared, shared)
		if err != nil {
			return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
		}
		sgu := p.out(m+".shared_expert.gate_up_proj.weight", "", kernels.PackedAttr(layer, "shared_gate_up_weight"),
			LayoutKMajor, []int64{hidden, twoS}, []int64{shared, shared}, t[sharedRoles[0]], t[sharedRoles[1]])
		sgu.Transforms = append([]string{TConcatGateUp}, sgu.Transforms...)
		sdn := p.out(m+".shared_expert.down_proj.weight", "", kernels.PackedAttr(layer, "shared_down_weight"),
			LayoutKMajor, []int64{shared, hidden}, nil, t[sharedRoles[2]])
		g := t[sharedRoles[3]] // the gate's [1, hidden] weight, read in place as the module's own
		lp.Outputs = append(lp.Outputs, sgu, sdn, p.out(g, "", "", LayoutRowMajor, p.shapeOf(g), nil, g))
		what = fmt.Sprintf("; the shared expert (width %d) by our GEMMs (gate/up with the swiglu epilogue), "+
			"scaled by sigmoid(shared_expert_gate(x)) and added to the routed experts' output in fp32, rounded once", shared)
	}
	lp.Kernel, lp.Layer = k.Name, layer
	if l.Router != models.RouterSoftmaxTopKNormFP32 && layer != layerRouterMoE {
		// Qwen3's router says whether it renormalizes (Mixtral's always does, GraniteMoE's too).
		extra = append(extra, "gate.norm_topk_prob")
	}
	lp.Bindings = []Binding{bind(m, l.Class, layer, lp.Outputs, extra...)}
	what = fmt.Sprintf("%d experts, top %d, router %s, routed on the device; only the experts hit run: gate/up "+
		"with the swiglu epilogue, down with the routing weight in its epilogue (decode: GEMVs; prefill: "+
		"grouped GEMMs over the tokens sorted by expert)", experts, topK, l.Router) + what
	lp.Reason = joinReasons(what, note)
	return nil
}

// stacked is an output stacking one 2-D source per expert (two, gate and up, for a
// concatenated one) along a new leading dim, each expert's slice transposed to K-major.
func (p *planner) stacked(name, attr string, shape, split []int64, sources []string) TensorPlan {
	o := p.out(name, "", attr, LayoutKMajor, shape, split, sources...)
	o.Transforms = append([]string{TStackExperts}, o.Transforms...)
	return o
}
