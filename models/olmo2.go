package models

// OLMo 2 (model_type "olmo2"): Llama's modules in another block. Read against transformers
// 5.17 models/olmo2/{configuration,modeling}_olmo2.py:
//   - The block has no input norm. It normalizes each branch's output before adding it to
//     the residual: post_attention_layernorm after the attention, post_feedforward_layernorm
//     after the MLP (Olmo2DecoderLayer.forward).
//   - Olmo2RMSNorm multiplies the weight into the fp32 normalized row and rounds once
//     (rmsnorm-fp32), where Llama's rounds before the multiply.
//   - q_norm and k_norm normalize the whole projection, [heads·head_dim] and
//     [kv_heads·head_dim], before it is split into heads (Olmo2Attention.forward).
//   - Olmo2Config has no head_dim field: hidden_size / num_attention_heads. Embeddings are
//     untied by default; no projection carries a bias unless attention_bias says so.
var olmo2 = llamaFamily{
	modelType: "olmo2",
	class:     "Olmo2",
	defaults: llamaConfig{
		VocabSize: 50304, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-5,
	},
	qkvBias:    attentionBias,
	oBias:      attentionBias,
	mlpBias:    never,
	qkNormFull: true,
	postNorms:  true,
	ignore:     []string{".rotary_emb.inv_freq"},
	mark:       olmo2Layers,
}

func init() { registerLlamaFamily(olmo2) }

// olmo2Layers gives Llama's norms OLMo 2's kind, and refuses an MLP activation other than
// the SwiGLU kind's.
func olmo2Layers(ck *Checkpoint, _ *llamaConfig) (func(l *Layer), error) {
	s := struct {
		HiddenAct string `json:"hidden_act"`
	}{HiddenAct: "silu"}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	if s.HiddenAct != "silu" {
		return nil, configError(ck, "hidden_act is %q; the OLMo 2 MLP here computes silu", s.HiddenAct)
	}
	return func(l *Layer) {
		if l.Kind == KindRMSNorm {
			l.Kind = KindRMSNormFP32
		}
	}, nil
}
