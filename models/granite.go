package models

import "strings"

// Granite (model_type "granite"): Llama's layers under Granite* class names, with four
// scalars. Read against transformers 5.17 models/granite:
//   - attention_multiplier is the attention's softmax scale (GraniteAttention.scaling), and
//     embedding_multiplier and logits_scaling apply in GraniteModel's and
//     GraniteForCausalLM's forwards, outside every layer here: none shapes a weight.
//   - residual_multiplier scales the attention's and the MLP's outputs before each residual
//     add (GraniteDecoderLayer.forward); where it is not 1 the post-attention norm carries it
//     as ResidualScale.
//   - attention_bias and mlp_bias switch the projections' biases; embeddings are untied by
//     default.
var granite = llamaFamily{
	modelType: "granite",
	class:     "Granite",
	defaults:  llama.defaults, // GraniteConfig's defaults are LlamaConfig's
	qkvBias:   attentionBias,
	oBias:     attentionBias,
	mlpBias:   mlpBiased,
	ignore:    []string{".rotary_emb.inv_freq"},
	mark:      graniteResidual,
}

func init() { registerLlamaFamily(granite) }

// graniteResidual marks the post-attention norms with residual_multiplier.
func graniteResidual(ck *Checkpoint, _ *llamaConfig) (func(l *Layer), error) {
	s := struct {
		ResidualMultiplier float64 `json:"residual_multiplier"`
	}{ResidualMultiplier: 1}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	if !(s.ResidualMultiplier > 0) {
		return nil, configError(ck, "residual_multiplier is %v, want a positive scale", s.ResidualMultiplier)
	}
	return func(l *Layer) {
		if s.ResidualMultiplier != 1 && l.Kind == KindRMSNorm && l.Block >= 0 &&
			strings.HasSuffix(l.Module, ".post_attention_layernorm") {
			l.ResidualScale = s.ResidualMultiplier
		}
	}, nil
}
