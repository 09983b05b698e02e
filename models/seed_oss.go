package models

// Seed-OSS (model_type "seed_oss": ByteDance-Seed/Seed-OSS-36B). Read against transformers
// 5.17 models/seed_oss/{configuration,modeling}_seed_oss.py: Llama's modules, with
// attention_bias (default true) switching the q/k/v biases and attention_out_bias (default
// false) o_proj's; head_dim is its own field (default 128); the residual dropouts act in
// training only.
var seedOSS = llamaFamily{
	modelType: "seed_oss",
	class:     "SeedOss",
	defaults: llamaConfig{
		VocabSize: 155136, HiddenSize: 4096, IntermediateSize: 27648, NumHiddenLayers: 64,
		NumAttentionHeads: 80, NumKeyValueHeads: optInt{Set: true, V: 8}, HeadDim: optInt{Set: true, V: 128},
		RMSNormEps: 1e-6, AttentionBias: true,
	},
	kvHeadsDefault: 8,
	headDimDefault: 128,
	qkvBias:        attentionBias,
	oBias:          func(c *llamaConfig) bool { return c.AttentionOutBias },
	mlpBias:        mlpBiased,
	ignore:         []string{".rotary_emb.inv_freq"},
}

func init() { registerLlamaFamily(seedOSS) }
