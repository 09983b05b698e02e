package models

import (
	"cmp"
	"fmt"
)

// The mixture-of-experts block the MoE families share (qwen3_moe.go, mixtral.go). Read
// against transformers 5.17 models/qwen3_moe/modeling_qwen3_moe.py and
// models/mixtral/modeling_mixtral.py.
//
// Checkpoints store every expert as its own 2D tensors, as save_pretrained writes them and
// the Hub publishes them; transformers stacks them at load (conversion_mapping.py) into the
// experts module's gate_up_proj [E, 2I, H] and down_proj [E, H, I]. The layer's roles name
// those 2D tensors:
//
//	gate.weight                    router weight [experts, hidden]
//	experts.<e>.gate_proj.weight   expert e's gate [intermediate, hidden]
//	experts.<e>.up_proj.weight     expert e's up [intermediate, hidden]
//	experts.<e>.down_proj.weight   expert e's down [hidden, intermediate]
//
// Dims: "hidden", "intermediate" (one expert's width), "experts", "top_k".

// Routing rules (Layer.Router). Every one takes the softmax of the router logits in fp32
// and the top_k of the probabilities (torch.topk); they differ after that.
const (
	// RouterSoftmaxTopK keeps the top-k probabilities as the weights, rounded to the
	// activation dtype (Qwen3MoeTopKRouter, norm_topk_prob false).
	RouterSoftmaxTopK = "softmax-topk"
	// RouterSoftmaxTopKNorm divides them by their sum first (norm_topk_prob true).
	RouterSoftmaxTopKNorm = "softmax-topk-norm"
	// RouterSoftmaxTopKNormFP32 divides them by their sum and keeps them fp32, so each
	// expert's output is scaled in fp32 (MixtralTopKRouter): the softmax over the top-k
	// logits.
	RouterSoftmaxTopKNormFP32 = "softmax-topk-norm-fp32"
)

// moeBlock is one family's MoE block as the checkpoint names it.
type moeBlock struct {
	class                string
	experts, topK, inter int64
	hidden               int64
	router               string
	// prefix is the checkpoint's name of the block under a decoder layer ("mlp",
	// "block_sparse_moe"); module the name transformers loads it as ("" for "mlp").
	prefix, module string
	// stacked: the checkpoint stores the experts as transformers' modules hold them, one
	// tensor a projection (GraniteMoE): input_linear.weight [experts, 2·intermediate,
	// hidden], each expert's gate rows then up, and output_linear.weight [experts, hidden,
	// intermediate]; router.layer.weight is the router. Each expert's gate, up and down are
	// views of them (Checkpoint.AddView) under the roles below.
	stacked bool
	// gate, up, down are the expert projections' checkpoint names (gate_proj or w1, ...).
	gate, up, down string
	// why says which config fields give experts and the expert width.
	expertsField, interField string
	// sharedInter, when positive, is the width of a shared expert every token runs beside the
	// routed ones, its output scaled by sigmoid(shared_expert_gate(x)) (Qwen2-MoE):
	//
	//	shared_expert.{gate,up}_proj.weight [shared, hidden], shared_expert.down_proj.weight
	//	[hidden, shared], shared_expert_gate.weight [1, hidden]; Dims "shared_intermediate".
	sharedInter int64
	sharedField string
}

func (m moeBlock) add(b *builder, blk string, i int, blockClass string) {
	h, e, inter := m.hidden, m.experts, m.inter
	src := blk + "." + m.prefix
	hidden := fmt.Sprintf("hidden_size=%d", h)
	why := fmt.Sprintf("%s=%d, %s", m.interField, inter, hidden)
	ewhy := fmt.Sprintf("%s=%d, %s", m.expertsField, e, hidden)
	module := blk + "." + cmp.Or(m.module, "mlp")
	if m.stacked {
		m.addStacked(b, src, module, i, blockClass, ewhy, why)
		return
	}
	needs := []need{{"gate.weight", src + ".gate.weight", []int64{e, h}, ewhy, false}}
	for x := int64(0); x < e; x++ {
		pre := fmt.Sprintf("%s.experts.%d.", src, x)
		role := fmt.Sprintf("experts.%d.", x)
		needs = append(needs,
			need{role + "gate_proj.weight", pre + m.gate + ".weight", []int64{inter, h}, why, false},
			need{role + "up_proj.weight", pre + m.up + ".weight", []int64{inter, h}, why, false},
			need{role + "down_proj.weight", pre + m.down + ".weight", []int64{h, inter}, why, false})
	}
	dims := map[string]int64{"hidden": h, "intermediate": inter, "experts": e, "top_k": m.topK}
	if s := m.sharedInter; s > 0 {
		why := fmt.Sprintf("%s=%d, %s", m.sharedField, s, hidden)
		needs = append(needs,
			need{"shared_expert.gate_proj.weight", src + ".shared_expert.gate_proj.weight", []int64{s, h}, why, false},
			need{"shared_expert.up_proj.weight", src + ".shared_expert.up_proj.weight", []int64{s, h}, why, false},
			need{"shared_expert.down_proj.weight", src + ".shared_expert.down_proj.weight", []int64{h, s}, why, false},
			need{"shared_expert_gate.weight", src + ".shared_expert_gate.weight", []int64{1, h}, hidden, false})
		dims["shared_intermediate"] = s
	}
	b.add(Layer{Module: module, Kind: KindMoE, Class: m.class, Block: i, BlockClass: blockClass,
		Router: m.router, Dims: dims}, needs...)
}

// addStacked adds a block whose experts are stacked (moeBlock.stacked): the router and one
// view a projection and expert, under the per-expert roles, named after the stacked tensor
// and the part they are ("…input_linear.weight[3][0:40]": expert 3's gate rows).
func (m moeBlock) addStacked(b *builder, src, module string, i int, blockClass, ewhy, why string) {
	if b.err != nil {
		return
	}
	h, e, inter := m.hidden, m.experts, m.inter
	router := src + ".router.layer.weight"
	in, out := src+".input_linear.weight", src+".output_linear.weight"
	for _, t := range []struct {
		name  string
		shape []int64
	}{{in, []int64{e, 2 * inter, h}}, {out, []int64{e, h, inter}}} {
		if _, err := b.ck.Need(t.name, t.shape, fmt.Sprintf("%s, %s", ewhy, why)); err != nil {
			b.err = fmt.Errorf("%w (%s layer %s)", err, b.ck.ModelType, module)
			return
		}
	}
	needs := []need{{"gate.weight", router, []int64{e, h}, ewhy, false}}
	for x := int64(0); x < e; x++ {
		role := fmt.Sprintf("experts.%d.", x)
		for _, v := range []struct {
			role, name, of string
			elem           int64
			shape          []int64
		}{
			{"gate_proj", fmt.Sprintf("%s[%d][0:%d]", in, x, inter), in, x * 2 * inter * h, []int64{inter, h}},
			{"up_proj", fmt.Sprintf("%s[%d][%d:%d]", in, x, inter, 2*inter), in, (x*2 + 1) * inter * h, []int64{inter, h}},
			{"down_proj", fmt.Sprintf("%s[%d]", out, x), out, x * h * inter, []int64{h, inter}},
		} {
			if err := b.ck.AddView(v.name, v.of, v.elem, v.shape); err != nil {
				b.err = fmt.Errorf("%w (%s layer %s)", err, b.ck.ModelType, module)
				return
			}
			needs = append(needs, need{role + v.role + ".weight", v.name, v.shape, why, false})
		}
	}
	dims := map[string]int64{"hidden": h, "intermediate": inter, "experts": e, "top_k": m.topK}
	b.add(Layer{Module: module, Kind: KindMoE, Class: m.class, Block: i, BlockClass: blockClass,
		Router: m.router, Dims: dims}, needs...)
}

// checkMoE validates the expert counts every family shares.
func checkMoE(ck *Checkpoint, experts, topK, inter int64, expertsField, interField string) error {
	switch {
	case experts <= 0:
		return configError(ck, "%s is %d, must be positive", expertsField, experts)
	case topK <= 0 || topK > experts:
		return configError(ck, "num_experts_per_tok is %d, want 1 to %s (%d)", topK, expertsField, experts)
	case inter <= 0:
		return configError(ck, "%s is %d, must be positive", interField, inter)
	}
	return nil
}
