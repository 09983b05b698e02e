package models

// ERNIE 4.5 dense (model_type "ernie4_5": baidu/ERNIE-4.5-0.3B). Read against transformers
// 5.17 models/ernie4_5/{configuration,modeling}_ernie4_5.py: Llama's block and RMSNorm, with
//   - RoPE over every channel of each head in adjacent pairs (2i, 2i+1), GLM's rotation, in
//     fp32 on fp32 cos/sin with one rounding (apply_rotary_pos_emb): the attention carries
//     InterleavedRotary, and the plan reorders its q and k rows (rope-deinterleave);
//   - use_bias switching the biases of all seven projections (q, k, v, o, gate, up, down);
//   - head_dim 128 and 2 KV heads by default, embeddings tied by default.
var ernie45 = llamaFamily{
	modelType: "ernie4_5",
	class:     "Ernie4_5",
	defaults: llamaConfig{
		VocabSize: 103424, HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 18,
		NumAttentionHeads: 16, NumKeyValueHeads: optInt{Set: true, V: 2}, HeadDim: optInt{Set: true, V: 128},
		RMSNormEps: 1e-5, TieWordEmbeddings: true,
	},
	kvHeadsDefault: 2,
	headDimDefault: 128,
	qkvBias:        useBias,
	oBias:          useBias,
	mlpBias:        useBias,
	interleaved:    true,
	ignore:         []string{".rotary_emb.inv_freq"},
}

func useBias(c *llamaConfig) bool { return c.UseBias }

func init() { registerLlamaFamily(ernie45) }
