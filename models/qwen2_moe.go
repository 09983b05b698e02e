package models

// Qwen2-MoE (model_type "qwen2_moe"; Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention
// (q/k/v biases when qkv_bias, the default; o_proj without) with Qwen3-MoE's sparse blocks
// and placement (qwen3_moe.go), plus a shared expert in every sparse block: a SwiGLU MLP of
// shared_expert_intermediate_size that every token runs, its output scaled by
// sigmoid(shared_expert_gate(x)) and added to the routed experts' (Qwen2MoeSparseMoeBlock).
// Read against transformers 5.17 models/qwen2_moe/{configuration,modeling}_qwen2_moe.py.
var qwen2MoE = llamaFamily{
	modelType: "qwen2_moe",
	class:     "Qwen2Moe",
	defaults: llamaConfig{
		VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 5632, NumHiddenLayers: 24,
		NumAttentionHeads: 16, NumKeyValueHeads: optInt{Set: true, V: 16}, RMSNormEps: 1e-6,
	},
	kvHeadsDefault: 16,
	qkvBias:        func(c *llamaConfig) bool { return c.QKVBias == nil || *c.QKVBias },
	oBias:          never,
	mlpBias:        never,
	ignore:         []string{".rotary_emb.inv_freq"},
	sparse: qwenMoE{class: "Qwen2Moe", experts: 60, shared: true, defaults: qwen3MoEConfig{NumExpertsPerTok: 4,
		MoEIntermediate: 1408, DecoderSparseStep: 1, HiddenAct: "silu", SharedInter: 5632}}.sparse,
}

func init() { registerLlamaFamily(qwen2MoE) }
