package models

// Qwen3-MoE (model_type "qwen3_moe"): Qwen3's attention (q_norm, k_norm) with sparse MoE
// blocks (moe.go) in place of the MLP. Read against transformers 5.17
// models/qwen3_moe/{configuration,modeling}_qwen3_moe.py.
//
// Layer i's feed-forward is a Qwen3MoeSparseMoeBlock when i is not in mlp_only_layers,
// num_experts > 0 and (i+1) % decoder_sparse_step == 0 (Qwen3MoeDecoderLayer.__init__);
// otherwise a dense Qwen3MoeMLP of intermediate_size. Expert width is
// moe_intermediate_size. The router (mlp.gate) is softmax then top-k, renormalized when
// norm_topk_prob. Qwen3MoeConfig has no head_dim field: the attention takes config.json's,
// else hidden_size / num_attention_heads. The config names the expert count num_experts
// (Hub configs) and save_pretrained writes it as num_local_experts (its attribute_map).

type qwen3MoEConfig struct {
	NumExperts        optInt  `json:"num_experts"`
	SharedInter       int64   `json:"shared_expert_intermediate_size"`
	NumLocalExperts   optInt  `json:"num_local_experts"`
	NumExpertsPerTok  int64   `json:"num_experts_per_tok"`
	MoEIntermediate   int64   `json:"moe_intermediate_size"`
	NormTopKProb      bool    `json:"norm_topk_prob"`
	DecoderSparseStep int64   `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int64 `json:"mlp_only_layers"`
	HiddenAct         string  `json:"hidden_act"`
}

var qwen3MoE = llamaFamily{
	modelType: "qwen3_moe",
	class:     "Qwen3Moe",
	defaults: llamaConfig{
		VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 6144, NumHiddenLayers: 24,
		NumAttentionHeads: 32, NumKeyValueHeads: optInt{Set: true, V: 4}, RMSNormEps: 1e-6,
	},
	kvHeadsDefault: 4,
	qkvBias:        attentionBias,
	oBias:          attentionBias,
	mlpBias:        never,
	qkNorm:         true,
	ignore:         []string{".rotary_emb.inv_freq"},
	sparse: qwenMoE{class: "Qwen3Moe", experts: 128, defaults: qwen3MoEConfig{NumExpertsPerTok: 8, MoEIntermediate: 768,
		DecoderSparseStep: 1, HiddenAct: "silu"}}.sparse,
}

func init() { registerLlamaFamily(qwen3MoE) }

// qwenMoE is what Qwen3-MoE and Qwen2-MoE (qwen2_moe.go) differ in: the class prefix, the
// config class defaults and the expert count when config.json names none, and Qwen2-MoE's
// shared expert.
type qwenMoE struct {
	class    string
	experts  int64
	defaults qwen3MoEConfig
	shared   bool
}

func (q qwenMoE) sparse(ck *Checkpoint, lc *llamaConfig) (func(b *builder, blk string, i int) bool, error) {
	c := q.defaults
	if err := decodeConfig(ck, &c); err != nil {
		return nil, err
	}
	experts := q.experts
	switch ne, nl := c.NumExperts, c.NumLocalExperts; {
	case ne.Set && nl.Set && !ne.Null && !nl.Null && ne.V != nl.V:
		return nil, configError(ck, "num_experts %d and num_local_experts %d disagree", ne.V, nl.V)
	case nl.Set && !nl.Null:
		experts = nl.V
	case ne.Set && !ne.Null:
		experts = ne.V
	}
	if c.HiddenAct != "silu" {
		return nil, configError(ck, "hidden_act is %q; the %s experts here compute silu (SwiGLU)", c.HiddenAct, q.class)
	}
	if c.DecoderSparseStep <= 0 {
		return nil, configError(ck, "decoder_sparse_step is %d, must be positive", c.DecoderSparseStep)
	}
	if experts == 0 {
		// num_experts 0 makes every layer dense (Qwen3MoeDecoderLayer.__init__).
		return func(*builder, string, int) bool { return false }, nil
	}
	if err := checkMoE(ck, experts, c.NumExpertsPerTok, c.MoEIntermediate, "num_experts", "moe_intermediate_size"); err != nil {
		return nil, err
	}
	if q.shared && c.SharedInter <= 0 {
		return nil, configError(ck, "shared_expert_intermediate_size is %d, must be positive", c.SharedInter)
	}
	dense := map[int64]bool{}
	for _, i := range c.MLPOnlyLayers {
		if i < 0 || i >= lc.NumHiddenLayers {
			return nil, configError(ck, "mlp_only_layers holds %d; layers are 0 to %d", i, lc.NumHiddenLayers-1)
		}
		dense[i] = true
	}
	router := RouterSoftmaxTopK
	if c.NormTopKProb {
		router = RouterSoftmaxTopKNorm
	}
	m := moeBlock{class: q.class + "SparseMoeBlock", experts: experts, topK: c.NumExpertsPerTok, inter: c.MoEIntermediate,
		hidden: lc.HiddenSize, router: router, prefix: "mlp", gate: "gate_proj", up: "up_proj", down: "down_proj",
		expertsField: "num_experts", interField: "moe_intermediate_size"}
	if q.shared {
		m.sharedInter, m.sharedField = c.SharedInter, "shared_expert_intermediate_size"
	}
	return func(b *builder, blk string, i int) bool {
		if dense[int64(i)] || int64(i+1)%c.DecoderSparseStep != 0 {
			return false
		}
		m.add(b, blk, i, q.class+"DecoderLayer")
		return true
	}, nil
}
