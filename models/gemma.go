package models

// Gemma 1 (model_type "gemma"): Llama's block under Gemma* class names, with Gemma's
// norms, a GeGLU MLP and a scaled embedding. Read against transformers 5.17
// models/gemma/{configuration,modeling}_gemma.py:
//   - GemmaRMSNorm computes x/rms(x) · (1 + w) in fp32 and rounds once (rmsnorm-gemma), and
//     the block adds its residuals as Llama's does: after the attention, before
//     post_attention_layernorm, and after the MLP.
//   - GemmaMLP applies ACT2FN[config.hidden_act] (not hidden_activation, which Hub configs
//     may also carry and 5.17's Gemma 1 ignores). Published checkpoints name "gelu", the
//     exact erf form; GemmaConfig's default is "gelu_pytorch_tanh". The MLP layer records
//     which (Activation).
//   - GemmaTextScaledWordEmbedding multiplies its output by √hidden in its forward; the
//     table is stored unscaled, and a tied lm_head reads it so.
//   - GemmaConfig's defaults are gemma-7b's shape: 16 key/value heads when the field is
//     left out, head_dim 256, tied embeddings.
var gemma = llamaFamily{
	modelType: "gemma",
	class:     "Gemma",
	defaults: llamaConfig{
		VocabSize: 256000, HiddenSize: 3072, IntermediateSize: 24576, NumHiddenLayers: 28,
		NumAttentionHeads: 16, RMSNormEps: 1e-6, TieWordEmbeddings: true,
	},
	kvHeadsDefault: 16,
	headDimDefault: 256,
	qkvBias:        attentionBias,
	oBias:          attentionBias,
	mlpBias:        never,
	ignore:         []string{".rotary_emb.inv_freq"},
	mark:           gemmaLayers,
}

func init() { registerLlamaFamily(gemma) }

// The MLP activations the mlp-geglu kind computes (Layer.Activation; "" is the tanh form).
const (
	ActGeLUTanh  = "gelu_pytorch_tanh"
	ActGeLUExact = "gelu"
)

// gemmaLayers gives Llama's layers Gemma's kinds: the norms, the GeGLU MLP with the
// config's hidden_act, and the scaled embedding's class.
func gemmaLayers(ck *Checkpoint, _ *llamaConfig) (func(l *Layer), error) {
	s := struct {
		HiddenAct string `json:"hidden_act"`
	}{HiddenAct: ActGeLUTanh}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	if s.HiddenAct != ActGeLUTanh && s.HiddenAct != ActGeLUExact {
		return nil, configError(ck, "hidden_act is %q; the Gemma MLP here computes %q or %q",
			s.HiddenAct, ActGeLUExact, ActGeLUTanh)
	}
	return func(l *Layer) {
		switch l.Kind {
		case KindRMSNorm:
			l.Kind = KindRMSNormGemma
		case KindMLPSwiGLU:
			l.Kind = KindMLPGeGLU
			if s.HiddenAct != ActGeLUTanh {
				l.Activation = s.HiddenAct
			}
		case KindEmbedding:
			l.Class = "GemmaTextScaledWordEmbedding"
		}
	}, nil
}
