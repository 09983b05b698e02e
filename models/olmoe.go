package models

// OLMoE (model_type "olmoe": allenai/OLMoE-1B-7B-0924, -0125). Read against transformers 5.17
// models/olmoe/{configuration,modeling}_olmoe.py:
//   - Llama's block and RMSNorm, with a sparse MoE block (moe.go) in every layer's place of
//     the MLP: num_experts experts of intermediate_size (OLMoE has no moe_intermediate_size),
//     num_experts_per_tok of them per token, the router's softmax → top-k renormalized only
//     when norm_topk_prob (OlmoeTopKRouter, default false), as Qwen3-MoE's.
//   - q_norm and k_norm normalize the whole projection before the split into heads, as
//     OLMo 2's (olmo2.go), but in Llama's order: [hidden] and [hidden / heads · kv_heads].
//   - clip_qkv, when set, clamps q, k and v after their projections; the attention here does
//     not, so such a config is refused.
//   - OlmoeConfig has no head_dim field: hidden_size / num_attention_heads.
var olmoe = llamaFamily{
	modelType: "olmoe",
	class:     "Olmoe",
	defaults: llamaConfig{
		VocabSize: 50304, HiddenSize: 2048, IntermediateSize: 2048, NumHiddenLayers: 16,
		NumAttentionHeads: 16, RMSNormEps: 1e-5,
	},
	qkvBias:    attentionBias,
	oBias:      attentionBias,
	mlpBias:    never,
	qkNormFull: true,
	ignore:     []string{".rotary_emb.inv_freq"},
	sparse:     olmoeSparse,
}

func init() { registerLlamaFamily(olmoe) }

// olmoeConfig is the part of config.json OLMoE's experts and attention add.
type olmoeConfig struct {
	NumExperts       int64    `json:"num_experts"`
	NumExpertsPerTok int64    `json:"num_experts_per_tok"`
	NormTopKProb     bool     `json:"norm_topk_prob"`
	HiddenAct        string   `json:"hidden_act"`
	ClipQKV          *float64 `json:"clip_qkv"`
	HeadDim          *int64   `json:"head_dim"`
}

func olmoeSparse(ck *Checkpoint, lc *llamaConfig) (func(b *builder, blk string, i int) bool, error) {
	return sparseOlmoe(ck, lc, "Olmoe", 64, 8)
}

// sparseOlmoe builds OLMoE's sparse block under a family's class prefix, with its config
// class's expert count and top-k for fields config.json leaves out.
func sparseOlmoe(ck *Checkpoint, lc *llamaConfig, class string, experts, topK int64) (func(b *builder, blk string, i int) bool, error) {
	c := olmoeConfig{NumExperts: experts, NumExpertsPerTok: topK, HiddenAct: "silu"}
	if err := decodeConfig(ck, &c); err != nil {
		return nil, err
	}
	if c.ClipQKV != nil {
		return nil, configError(ck, "clip_qkv is %v; the attention here does not clamp q, k and v", *c.ClipQKV)
	}
	// q_norm is hidden_size wide whatever head_dim says (OlmoeAttention.__init__).
	if c.HeadDim != nil && *c.HeadDim*lc.NumAttentionHeads != lc.HiddenSize {
		return nil, configError(ck, "head_dim %d × num_attention_heads %d is not hidden_size %d, which OLMoE's q_norm spans",
			*c.HeadDim, lc.NumAttentionHeads, lc.HiddenSize)
	}
	if c.HiddenAct != "silu" {
		return nil, configError(ck, "hidden_act is %q; the OLMoE experts here compute silu (SwiGLU)", c.HiddenAct)
	}
	if err := checkMoE(ck, c.NumExperts, c.NumExpertsPerTok, lc.IntermediateSize, "num_experts", "intermediate_size"); err != nil {
		return nil, err
	}
	router := RouterSoftmaxTopK
	if c.NormTopKProb {
		router = RouterSoftmaxTopKNorm
	}
	m := moeBlock{class: class + "SparseMoeBlock", experts: c.NumExperts, topK: c.NumExpertsPerTok, inter: lc.IntermediateSize,
		hidden: lc.HiddenSize, router: router, prefix: "mlp", gate: "gate_proj", up: "up_proj", down: "down_proj",
		expertsField: "num_experts", interField: "intermediate_size"}
	return func(b *builder, blk string, i int) bool {
		m.add(b, blk, i, class+"DecoderLayer")
		return true
	}, nil
}
