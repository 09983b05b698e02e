package models

// Qwen2 (model_type "qwen2"): Llama's layers under Qwen2* class names. Read against
// transformers 5.17 models/qwen2: Qwen2Attention always builds q/k/v_proj with biases
// and o_proj without (attention_bias is not read); Qwen2MLP has no biases;
// Qwen2Config defaults num_key_value_heads to 32 when config.json leaves it out and has
// no head_dim field (the attention falls back to hidden_size / num_attention_heads).
var qwen2 = llamaFamily{
	modelType: "qwen2",
	class:     "Qwen2",
	defaults: llamaConfig{
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-6,
	},
	kvHeadsDefault: 32,
	qkvBias:        func(*llamaConfig) bool { return true },
	oBias:          never,
	mlpBias:        never,
	ignore:         []string{".rotary_emb.inv_freq"},
}

func init() { registerLlamaFamily(qwen2) }
