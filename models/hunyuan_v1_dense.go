package models

// HunYuan dense (model_type "hunyuan_v1_dense": tencent/Hunyuan-0.5B to -7B). Read against
// transformers 5.17 models/hunyuan_v1_dense/{configuration,modeling}_hunyuan_v1_dense.py:
//   - Llama's block and MLP under HunYuanDenseV1* class names; attention_bias switches all four
//     attention projections' biases, and the MLP has none.
//   - query_layernorm and key_layernorm normalize each head over head_dim after RoPE
//     (HunYuanDenseV1Attention.forward), in Llama's rounding; the planner records them as q/k
//     norms with QKNormAfterRope.
//   - num_key_value_heads defaults to num_attention_heads; head_dim null means hidden / heads.
//   - RoPE with an "alpha" scales its base once (rope_theta · alpha^(d/(d-2))), in the model's
//     rotary module, whose cos/sin reach the attention as any Llama's do.
var hunyuanDense = llamaFamily{
	modelType: "hunyuan_v1_dense",
	class:     "HunYuanDenseV1",
	defaults: llamaConfig{
		VocabSize: 290943, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-5,
	},
	qkvBias:     attentionBias,
	oBias:       attentionBias,
	mlpBias:     never,
	qkNorm:      true,
	qkNormAfter: true,
	ignore:      []string{".rotary_emb.inv_freq"},
}

func init() { registerLlamaFamily(hunyuanDense) }
