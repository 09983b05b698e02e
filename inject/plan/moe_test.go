package plan

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/models"
)

func planFixture(t *testing.T, name string, opts Options) *Plan {
	t.Helper()
	g, err := models.Load(filepath.Join(fixturesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(g, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func moeLayer(t *testing.T, p *Plan, module string) LayerPlan {
	t.Helper()
	for _, l := range p.Layers {
		if l.Module == module {
			return l
		}
	}
	t.Fatalf("no layer %s in the plan", module)
	return LayerPlan{}
}

// TestPlanMoE: the sparse block is one SparseMoE layer whose outputs stack the per-expert
// tensors in expert order, each expert's gate then up, as the kernel reads them.
func TestPlanMoE(t *testing.T) {
	p := planFixture(t, "mixtral-tiny", Options{})
	l := moeLayer(t, p, "model.layers.1.mlp")
	if l.Kernel != "moe" || l.Layer != layerSparseMoE || l.Router != models.RouterSoftmaxTopKNormFP32 {
		t.Fatalf("layer %+v", l)
	}
	if l.Dims["experts"] != 6 || l.Dims["top_k"] != 3 || l.Dims["intermediate"] != 24 {
		t.Errorf("dims %v", l.Dims)
	}
	if len(l.Outputs) != 3 {
		t.Fatalf("outputs %+v", l.Outputs)
	}
	router, gu, down := l.Outputs[0], l.Outputs[1], l.Outputs[2]
	if !slices.Equal(router.Shape, []int64{64, 6}) || router.Attr != "xpuinject_router_weight" ||
		router.Sources[0] != "model.layers.1.block_sparse_moe.gate.weight" {
		t.Errorf("router %+v", router)
	}
	if !slices.Equal(gu.Shape, []int64{6, 64, 48}) || !slices.Equal(gu.Split, []int64{24, 24}) ||
		!slices.Equal(gu.Transforms, []string{TStackExperts, TConcatGateUp, TPrepackKMajor}) || len(gu.Sources) != 12 ||
		gu.Sources[2] != "model.layers.1.block_sparse_moe.experts.1.w1.weight" ||
		gu.Sources[3] != "model.layers.1.block_sparse_moe.experts.1.w3.weight" {
		t.Errorf("gate_up %+v", gu)
	}
	if !slices.Equal(down.Shape, []int64{6, 24, 64}) || down.Sources[5] != "model.layers.1.block_sparse_moe.experts.5.w2.weight" {
		t.Errorf("down %+v", down)
	}
	b := l.Bindings[0]
	if b.Class != "MixtralSparseMoeBlock" || !slices.Contains(b.Reads, "gate.top_k") || slices.Contains(b.Reads, "gate.norm_topk_prob") {
		t.Errorf("binding %+v", b)
	}
	// Mixtral's decoder layer takes its parameters in another order: its own layer class.
	n := moeLayer(t, p, "model.layers.1.post_attention_layernorm")
	if n.Kernel != "add-rmsnorm" || n.Bindings[1].Layer != layerMoEDecoder {
		t.Errorf("post-attention norm %+v", n.Bindings)
	}

	q := moeLayer(t, planFixture(t, "qwen3-moe-tiny", Options{DType: DTypeFP16}), "model.layers.0.mlp")
	if q.Router != models.RouterSoftmaxTopKNorm || !slices.Contains(q.Bindings[0].Reads, "gate.norm_topk_prob") {
		t.Errorf("qwen3_moe %+v", q)
	}
	// BF16 sources into an fp16 plan: the cast is per expert, between the concat and the transpose.
	if got := q.Outputs[1].Transforms; !slices.Equal(got, []string{TStackExperts, TConcatGateUp, TCastFP16, TPrepackKMajor}) {
		t.Errorf("fp16 gate_up transforms %v", got)
	}

	// Disabled: kept, the per-expert tensors written under their own names.
	k := moeLayer(t, planFixture(t, "qwen3-moe-tiny", Options{Disable: []string{"moe"}}), "model.layers.0.mlp")
	if k.Kernel != KernelKeep || !strings.Contains(k.Reason, "kernel moe disabled") || len(k.Outputs) != 1+6*3 {
		t.Errorf("disabled %+v", k)
	}
}

// TestPlanStackedExperts: GraniteMoE's experts, stacked in the checkpoint, are packed from
// views of the stacked tensors in expert order (each expert's gate rows, then up); the block
// binds RouterMoE, its decoder layer ScaledMoEDecoderLayer with residual_multiplier; kept, the
// block writes each stacked tensor once, whole, under its own name.
func TestPlanStackedExperts(t *testing.T) {
	p := planFixture(t, "granitemoe-tiny", Options{})
	l := moeLayer(t, p, "model.layers.1.block_sparse_moe")
	if l.Kernel != "moe" || l.Layer != layerRouterMoE || l.Router != models.RouterSoftmaxTopKNorm || len(l.Outputs) != 3 {
		t.Fatalf("layer %+v", l)
	}
	in := "model.layers.1.block_sparse_moe.input_linear.weight"
	router, gu, down := l.Outputs[0], l.Outputs[1], l.Outputs[2]
	if router.Sources[0] != "model.layers.1.block_sparse_moe.router.layer.weight" || !slices.Equal(router.Shape, []int64{96, 5}) {
		t.Errorf("router %+v", router)
	}
	if !slices.Equal(gu.Shape, []int64{5, 96, 80}) || len(gu.Sources) != 10 || gu.Sources[2] != in+"[1][0:40]" ||
		gu.Sources[3] != in+"[1][40:80]" {
		t.Errorf("gate_up %+v", gu)
	}
	if len(down.Sources) != 5 || down.Sources[4] != "model.layers.1.block_sparse_moe.output_linear.weight[4]" {
		t.Errorf("down %+v", down)
	}
	if b := l.Bindings[0]; b.Class != "GraniteMoeMoE" || !slices.Contains(b.Reads, "router.top_k") ||
		slices.Contains(b.Reads, "gate.norm_topk_prob") {
		t.Errorf("binding %+v", b)
	}
	n := moeLayer(t, p, "model.layers.1.post_attention_layernorm")
	if len(n.Bindings) != 2 || n.Bindings[1].Layer != layerScaledMoEDecoder || !slices.Contains(n.Bindings[1].Reads, "residual_multiplier") ||
		!strings.Contains(n.Reason, "the MoE block's output is scaled and added as the stock block does") {
		t.Errorf("post-attention norm %+v", n)
	}

	k := moeLayer(t, planFixture(t, "granitemoe-tiny", Options{Disable: []string{"moe"}}), "model.layers.1.block_sparse_moe")
	var names []string
	for _, o := range k.Outputs {
		names = append(names, o.Name)
		if o.Name == in && (!slices.Equal(o.Shape, []int64{5, 80, 96}) || !slices.Equal(o.Sources, []string{in})) {
			t.Errorf("kept input_linear %+v", o)
		}
	}
	want := []string{in, "model.layers.1.block_sparse_moe.output_linear.weight", "model.layers.1.block_sparse_moe.router.layer.weight"}
	slices.Sort(names)
	if k.Kernel != KernelKeep || !slices.Equal(names, want) {
		t.Errorf("kept %s writes %v, want %v", k.Kernel, names, want)
	}
}

// TestPlanMoEKeeps: a router rule the kernel does not compute keeps the block, saying why.
func TestPlanMoEKeeps(t *testing.T) {
	g, err := models.Load(filepath.Join(fixturesDir, "qwen3-moe-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range g.Layers {
		if g.Layers[i].Kind == models.KindMoE {
			g.Layers[i].Router = "sigmoid-topk"
		}
	}
	p, err := New(g, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := moeLayer(t, p, "model.layers.0.mlp")
	if l.Kernel != KernelKeep || !strings.Contains(l.Reason, `router "sigmoid-topk" is not one the MoE kernel computes`) {
		t.Errorf("%+v", l)
	}
}
