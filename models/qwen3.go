package models

// Qwen3 (model_type "qwen3"): Llama's layers under Qwen3* class names, plus q_norm and
// k_norm (Qwen3RMSNorm over head_dim, eps rms_norm_eps) inside the attention. Read
// against transformers 5.17 models/qwen3: attention_bias switches all four projection
// biases; Qwen3MLP has none; Qwen3Config defaults head_dim to 128 and
// num_key_value_heads to 32 when config.json leaves them out.
var qwen3 = llamaFamily{
	modelType: "qwen3",
	class:     "Qwen3",
	defaults: llamaConfig{
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-6,
	},
	kvHeadsDefault: 32,
	headDimDefault: 128,
	qkvBias:        attentionBias,
	oBias:          attentionBias,
	mlpBias:        never,
	qkNorm:         true,
	ignore:         []string{".rotary_emb.inv_freq"},
}

func init() { registerLlamaFamily(qwen3) }
