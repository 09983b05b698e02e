package models

// Helium (model_type "helium": kyutai/helium-1-2b). Read against transformers 5.17
// models/helium/{configuration,modeling}_helium.py:
//   - Llama's block and MLP (mlp_bias) under Helium* class names.
//   - HeliumRMSNorm multiplies its weight into the fp32 normalized row and rounds once
//     (rmsnorm-fp32, OLMo 2's norm), every norm of the model.
//   - RoPE rotates adjacent channel pairs (2i, 2i+1) of each head (its apply_rotary_pos_emb):
//     the attention carries InterleavedRotary, and the plan reorders its q and k rows.
//   - attention_bias switches the q/k/v biases; o_proj has none and is hidden × hidden, so
//     heads × head_dim must be hidden_size (HeliumAttention). Softmax scale 1/√head_dim.
//   - head_dim 128 and no GQA by default; embeddings untied by default.
var helium = llamaFamily{
	modelType: "helium",
	class:     "Helium",
	defaults: llamaConfig{
		VocabSize: 48000, HiddenSize: 2560, IntermediateSize: 7040, NumHiddenLayers: 24,
		NumAttentionHeads: 20, NumKeyValueHeads: optInt{Set: true, V: 20}, HeadDim: optInt{Set: true, V: 128},
		RMSNormEps: 1e-8,
	},
	kvHeadsDefault: 20,
	headDimDefault: 128,
	qkvBias:        attentionBias,
	oBias:          never,
	mlpBias:        mlpBiased,
	interleaved:    true,
	ignore:         []string{".rotary_emb.inv_freq"},
	mark:           heliumLayers,
}

func init() { registerLlamaFamily(helium) }

// heliumLayers gives every norm the fp32 kind, and refuses a query width o_proj cannot take.
func heliumLayers(ck *Checkpoint, c *llamaConfig) (func(l *Layer), error) {
	hd := c.HeadDim.V
	if q := c.NumAttentionHeads * hd; hd > 0 && q != c.HiddenSize {
		return nil, configError(ck, "num_attention_heads %d × head_dim %d is %d, not hidden_size %d, which HeliumAttention's o_proj takes",
			c.NumAttentionHeads, hd, q, c.HiddenSize)
	}
	return func(l *Layer) {
		if l.Kind == KindRMSNorm {
			l.Kind = KindRMSNormFP32
		}
	}, nil
}
