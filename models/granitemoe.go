package models

// GraniteMoE (model_type "granitemoe": ibm-granite/granite-3.1-1b-a400m, -3b-a800m). Read
// against transformers 5.17 models/granitemoe/{configuration,modeling}_granitemoe.py and
// conversion_mapping.py:
//   - Granite's attention and four scalars (granite.go): residual_multiplier scales both
//     branches before their adds (GraniteMoeDecoderLayer.forward), marked on the
//     post-attention norms as Granite's are.
//   - Every layer's feed-forward is a sparse block, block_sparse_moe (transformers keeps the
//     name at load): num_local_experts experts of intermediate_size, num_experts_per_tok per
//     token. The router (GraniteMoeTopKRouter) takes the top-k of the bf16 logits and the
//     softmax over those k, rounded to the activation dtype: softmax → top-k → renormalized,
//     RouterSoftmaxTopKNorm.
//   - The checkpoint stores the experts stacked, as the loaded module holds them
//     (input_linear.weight [experts, 2·intermediate, hidden], gate rows then up;
//     output_linear.weight [experts, hidden, intermediate]; router.layer.weight), which
//     transformers renames to experts.gate_up_proj, experts.down_proj and router.weight.
//     Each expert's projections are views of them (moeBlock.stacked).
//   - GraniteMoeConfig has no head_dim or mlp_bias field.
var graniteMoE = llamaFamily{
	modelType: "granitemoe",
	class:     "GraniteMoe",
	defaults: llamaConfig{
		VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-6,
	},
	qkvBias: attentionBias,
	oBias:   attentionBias,
	mlpBias: never,
	ignore:  []string{".rotary_emb.inv_freq"},
	mark:    graniteResidual,
	sparse:  graniteMoESparse,
}

func init() { registerLlamaFamily(graniteMoE) }

func graniteMoESparse(ck *Checkpoint, lc *llamaConfig) (func(b *builder, blk string, i int) bool, error) {
	c, err := localExperts(ck, lc, "GraniteMoE")
	if err != nil {
		return nil, err
	}
	m := moeBlock{class: "GraniteMoeMoE", experts: c.NumLocalExperts, topK: c.NumExpertsPerTok,
		inter: lc.IntermediateSize, hidden: lc.HiddenSize, router: RouterSoftmaxTopKNorm,
		prefix: "block_sparse_moe", module: "block_sparse_moe", stacked: true,
		expertsField: "num_local_experts", interField: "intermediate_size"}
	return func(b *builder, blk string, i int) bool {
		m.add(b, blk, i, "GraniteMoeDecoderLayer")
		return true
	}, nil
}
