package models

// Mistral (model_type "mistral"): Llama's layers under Mistral* class names. Read against
// transformers 5.17 models/mistral: MistralConfig defaults num_key_value_heads to 8 when
// config.json leaves it out, has no attention_bias or mlp_bias (MistralAttention and
// MistralMLP build every projection with bias=False), and sliding_window only changes
// the attention mask, not the weights.
var mistral = llamaFamily{
	modelType: "mistral",
	class:     "Mistral",
	defaults: llamaConfig{
		VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-6,
	},
	kvHeadsDefault: 8,
	qkvBias:        never,
	oBias:          never,
	mlpBias:        never,
	ignore:         []string{".rotary_emb.inv_freq"},
}

func init() { registerLlamaFamily(mistral) }
