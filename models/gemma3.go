package models

// Gemma 3's text model (model_type "gemma3_text", Gemma3ForCausalLM): Gemma 2's layers
// (gemma2.go) under Gemma3* class names, plus q_norm and k_norm (Gemma3RMSNorm over
// head_dim, the same (1 + w) form) inside the attention. Read against transformers 5.17
// models/gemma3/{configuration,modeling}_gemma3.py: Gemma3TextConfig has no soft-capping by
// default; without layer_types every sliding_window_pattern-th layer (default 6) is full
// attention and the others slide. The two RoPE bases (rope_parameters per layer type in
// configs saved by 5.17; rope_theta and rope_local_base_freq on the Hub) reach the
// attention as cos/sin and shape no weight.
var gemma3 = gemmaFamily{
	modelType: "gemma3_text",
	class:     "Gemma3",
	bare:      "Gemma3TextModel",
	defaults: gemmaConfig{
		VocabSize: 262208, HiddenSize: 2304, IntermediateSize: 9216, NumHiddenLayers: 26,
		NumAttentionHeads: 8, NumKeyValueHeads: optInt{Set: true, V: 4}, HeadDim: optInt{Set: true, V: 256},
		RMSNormEps: 1e-6, TieWordEmbeddings: true, SlidingWindow: optInt{Set: true, V: 4096},
		SlidingWindowPattern: 6, HiddenActivation: "gelu_pytorch_tanh",
	},
	sliding: func(c *gemmaConfig, i int64) bool {
		return c.SlidingWindowPattern <= 0 || (i+1)%c.SlidingWindowPattern != 0
	},
	qkNorm: true,
}

func init() { registerGemmaFamily(gemma3) }
