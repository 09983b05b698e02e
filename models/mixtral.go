package models

// Mixtral (model_type "mixtral"): Mistral's attention with a sparse MoE block (moe.go) in
// every layer. Read against transformers 5.17 models/mixtral/{configuration,modeling}_mixtral.py
// and conversion_mapping.py.
//
// Checkpoints (the Hub's and save_pretrained's) name the block block_sparse_moe and the
// experts' projections w1 (gate), w3 (up) and w2 (down); transformers renames the block to
// mlp at load, which is the module the plan binds. Expert width is intermediate_size, the
// expert count num_local_experts. The router is softmax, top-k, renormalized, with the
// weights kept fp32 (MixtralTopKRouter).

var mixtral = llamaFamily{
	modelType: "mixtral",
	class:     "Mixtral",
	defaults: llamaConfig{
		VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
		NumAttentionHeads: 32, NumKeyValueHeads: optInt{Set: true, V: 8}, RMSNormEps: 1e-5,
	},
	kvHeadsDefault: 8,
	qkvBias:        never,
	oBias:          never,
	mlpBias:        never,
	ignore:         []string{".rotary_emb.inv_freq"},
	sparse:         mixtralSparse,
}

func init() { registerLlamaFamily(mixtral) }

type mixtralConfig struct {
	NumLocalExperts  int64  `json:"num_local_experts"`
	NumExpertsPerTok int64  `json:"num_experts_per_tok"`
	HiddenAct        string `json:"hidden_act"`
}

// localExperts reads and checks the expert fields Mixtral's config and GraniteMoE's share
// (their classes' defaults: 8 experts, top 2, silu); family names the experts in errors.
func localExperts(ck *Checkpoint, lc *llamaConfig, family string) (mixtralConfig, error) {
	c := mixtralConfig{NumLocalExperts: 8, NumExpertsPerTok: 2, HiddenAct: "silu"}
	if err := decodeConfig(ck, &c); err != nil {
		return c, err
	}
	if c.HiddenAct != "silu" {
		return c, configError(ck, "hidden_act is %q; the %s experts here compute silu (SwiGLU)", c.HiddenAct, family)
	}
	return c, checkMoE(ck, c.NumLocalExperts, c.NumExpertsPerTok, lc.IntermediateSize, "num_local_experts", "intermediate_size")
}

func mixtralSparse(ck *Checkpoint, lc *llamaConfig) (func(b *builder, blk string, i int) bool, error) {
	c, err := localExperts(ck, lc, "Mixtral")
	if err != nil {
		return nil, err
	}
	m := moeBlock{class: "MixtralSparseMoeBlock", experts: c.NumLocalExperts, topK: c.NumExpertsPerTok,
		inter: lc.IntermediateSize, hidden: lc.HiddenSize, router: RouterSoftmaxTopKNormFP32,
		gate: "w1", up: "w3", down: "w2", expertsField: "num_local_experts", interField: "intermediate_size"}
	return func(b *builder, blk string, i int) bool {
		m.prefix = "block_sparse_moe"
		if !b.ck.Has(blk+".block_sparse_moe.gate.weight") && b.ck.Has(blk+".mlp.gate.weight") {
			// Already renamed to the loaded module's name (only the block, not w1/w2/w3).
			m.prefix = "mlp"
		}
		m.add(b, blk, i, "MixtralDecoderLayer")
		return true
	}, nil
}
