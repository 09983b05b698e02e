package models

// FlexOlmo (model_type "flex_olmo": allenai/FlexOlmo-7x7B-1T). Read against transformers 5.17
// models/flex_olmo/{configuration,modular}_flex_olmo.py: OLMo 2's block (olmo2.go: no input
// norm, each branch's output normalized before its residual add, norms rounding once after
// their weight, q/k norms over the whole projection) with OLMoE's sparse MoE block (olmoe.go)
// in the MLP's place: num_experts experts (default 7) of intermediate_size, num_experts_per_tok
// (default 5) of them per token, renormalized only when norm_topk_prob.
var flexOlmo = func() llamaFamily {
	f := olmo2
	f.modelType, f.class = "flex_olmo", "FlexOlmo"
	f.defaults = llamaConfig{
		VocabSize: 100352, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-6,
	}
	f.sparse = func(ck *Checkpoint, c *llamaConfig) (func(b *builder, blk string, i int) bool, error) {
		return sparseOlmoe(ck, c, "FlexOlmo", 7, 5)
	}
	return f
}()

func init() { registerLlamaFamily(flexOlmo) }
