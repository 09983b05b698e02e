package models

import (
	"fmt"
	"strings"
)

// Llama (model_type "llama") and the base of its relatives (mistral.go, qwen2.go, qwen3.go,
// smollm3.go, granite.go, gemma.go, olmo2.go, qwen3_moe.go, mixtral.go, ernie4_5.go, olmoe.go,
// seed_oss.go, ministral.go, hunyuan_v1_dense.go, helium.go, flex_olmo.go). Read against
// transformers 5.17 models/llama/{configuration,modeling}_llama.py.
//
// Layers, in execution order (prefix "model." for *ForCausalLM, none for the bare
// *Model class):
//
//	embed_tokens                        embedding  Embedding        weight [vocab, hidden]
//	layers.i.input_layernorm            rmsnorm    <P>RMSNorm       weight [hidden]
//	layers.i.self_attn                  attention  <P>Attention     {q,k,v,o}_proj.weight (+ .bias), q_norm/k_norm.weight (qwen3)
//	layers.i.post_attention_layernorm   rmsnorm    <P>RMSNorm       weight [hidden]
//	layers.i.mlp                        mlp-swiglu <P>MLP           {gate,up,down}_proj.weight (+ .bias if mlp_bias)
//	norm                                rmsnorm    <P>RMSNorm       weight [hidden]
//	lm_head                             lm-head    Linear           weight [vocab, hidden], or the embedding when tied
//
// Dims: embedding/lm-head "vocab", "hidden"; rmsnorm "hidden"; attention "hidden",
// "heads", "kv_heads", "head_dim"; mlp-swiglu "hidden", "intermediate".

// llamaConfig is the part of config.json that shapes the weights (LlamaConfig and the
// config classes of its relatives). Fields hold the class defaults before decoding.
type llamaConfig struct {
	VocabSize         int64   `json:"vocab_size"`
	HiddenSize        int64   `json:"hidden_size"`
	IntermediateSize  int64   `json:"intermediate_size"`
	NumHiddenLayers   int64   `json:"num_hidden_layers"`
	NumAttentionHeads int64   `json:"num_attention_heads"`
	NumKeyValueHeads  optInt  `json:"num_key_value_heads"`
	HeadDim           optInt  `json:"head_dim"`
	RMSNormEps        float64 `json:"rms_norm_eps"`
	TieWordEmbeddings bool    `json:"tie_word_embeddings"`
	AttentionBias     bool    `json:"attention_bias"`
	MLPBias           bool    `json:"mlp_bias"`
	// QKVBias is Qwen2-MoE's switch of the q/k/v biases (nil: left out).
	QKVBias *bool `json:"qkv_bias"`
	// UseBias is ERNIE 4.5's one switch of every projection's bias.
	UseBias bool `json:"use_bias"`
	// AttentionOutBias is Seed-OSS's switch of o_proj's bias (attention_bias covers q/k/v).
	AttentionOutBias bool `json:"attention_out_bias"`
}

// llamaFamily is what a Llama-like architecture changes: its config defaults and which
// optional tensors its modules have. Related architectures are a llamaFamily value each.
type llamaFamily struct {
	modelType string
	// class is the transformers class prefix: Llama → LlamaRMSNorm, LlamaForCausalLM.
	class    string
	defaults llamaConfig
	// kvHeadsDefault is num_key_value_heads when config.json leaves it out
	// (0: num_attention_heads); null always means num_attention_heads.
	kvHeadsDefault int64
	// headDimDefault is head_dim when config.json leaves it out (0: hidden/heads).
	headDimDefault int64
	// qkvBias, oBias, mlpBias say whether those projections carry a bias.
	qkvBias, oBias, mlpBias func(c *llamaConfig) bool
	// qkNorm: the attention has q_norm/k_norm RMSNorms over head_dim (Qwen3).
	qkNorm bool
	// qkNormAfter: the per-head q/k norms are query_layernorm/key_layernorm and normalize the
	// rotated heads, after RoPE (HunYuan); with qkNorm.
	qkNormAfter bool
	// qkNormFull: the attention has q_norm/k_norm RMSNorms over all of its query / key heads at
	// once, [heads·head_dim] and [kv_heads·head_dim], applied before the heads are split (OLMo 2).
	qkNormFull bool
	// postNorms: the block has no input norm and normalizes each branch's output before its
	// residual add: post_attention_layernorm after the attention, post_feedforward_layernorm
	// after the MLP (OLMo 2).
	postNorms bool
	// ignore lists tensor-name suffixes a checkpoint may hold that no module owns
	// (rotary inv_freq buffers some older checkpoints saved).
	ignore []string
	// sparse, when set, reads the family's mixture-of-experts config and returns what
	// builds block i's feed-forward; that returns false where the block keeps the dense
	// MLP (moe.go).
	sparse func(ck *Checkpoint, c *llamaConfig) (func(b *builder, blk string, i int) bool, error)
	// mlpClass is the dense MLP's class when it is not <class>MLP.
	mlpClass string
	// mark, when set, reads the family's own config fields and returns what it sets on each
	// built layer (SmolLM3's NoPE layers and windows, Granite's residual scale).
	mark func(ck *Checkpoint, c *llamaConfig) (func(l *Layer), error)
	// layerWindows: mark gives each sliding layer its window (Architecture.LayerWindows).
	layerWindows bool
	// interleaved: RoPE rotates adjacent channel pairs (2i, 2i+1) of each head (ERNIE 4.5's
	// GLM-style rotation); the attention carries InterleavedRotary.
	interleaved bool
}

func never(*llamaConfig) bool { return false }

// attentionBias: attention_bias switches the biases of all four attention projections.
func attentionBias(c *llamaConfig) bool { return c.AttentionBias }

// mlpBiased: mlp_bias switches the biases of the MLP's three projections.
func mlpBiased(c *llamaConfig) bool { return c.MLPBias }

// llama: LlamaConfig defaults (configuration_llama.py); attention_bias and mlp_bias
// switch the biases of all four attention projections and of the MLP.
var llama = llamaFamily{
	modelType: "llama",
	class:     "Llama",
	defaults: llamaConfig{
		VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-6,
	},
	qkvBias: attentionBias,
	oBias:   attentionBias,
	mlpBias: mlpBiased,
	ignore:  []string{".rotary_emb.inv_freq"},
}

func init() { registerLlamaFamily(llama) }

func registerLlamaFamily(f llamaFamily) {
	Register(Architecture{ModelTypes: []string{f.modelType}, Build: f.build, LayerWindows: f.layerWindows})
}

func (f llamaFamily) config(ck *Checkpoint) (*llamaConfig, error) {
	c := f.defaults
	if err := decodeConfig(ck, &c); err != nil {
		return nil, err
	}
	switch {
	case !c.NumKeyValueHeads.Set:
		c.NumKeyValueHeads.V = f.kvHeadsDefault
	case c.NumKeyValueHeads.Null:
		c.NumKeyValueHeads.V = 0
	}
	if c.NumKeyValueHeads.V == 0 {
		c.NumKeyValueHeads.V = c.NumAttentionHeads
	}
	if err := checkDecoderHeads(ck, c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads,
		c.NumKeyValueHeads.V, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	// head_dim: a missing field takes the class default; null (and llama's None
	// default) means hidden_size / num_attention_heads, as the config's __post_init__
	// and the attention module's getattr fallback compute it.
	switch {
	case !c.HeadDim.Set && f.headDimDefault > 0:
		c.HeadDim.V = f.headDimDefault
	case !c.HeadDim.Set || c.HeadDim.Null:
		c.HeadDim.V = c.HiddenSize / c.NumAttentionHeads
	}
	if c.HeadDim.V <= 0 {
		return nil, configError(ck, "head_dim is %d (hidden_size %d, num_attention_heads %d)",
			c.HeadDim.V, c.HiddenSize, c.NumAttentionHeads)
	}
	return &c, nil
}

func (f llamaFamily) build(ck *Checkpoint) (*Graph, error) {
	c, err := f.config(ck)
	if err != nil {
		return nil, err
	}
	prefix, lmHead := "model.", true
	switch cls := mainClass(ck); cls {
	case "", f.class + "ForCausalLM":
	case f.class + "Model":
		prefix, lmHead = "", false
	default:
		return nil, fmt.Errorf("%w: %s: %q (supported: %sForCausalLM, %sModel)",
			ErrUnsupportedHead, ck.Dir, cls, f.class, f.class)
	}
	h, heads, kv, hd := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads.V, c.HeadDim.V
	inter, vocab := c.IntermediateSize, c.VocabSize
	hidden := fmt.Sprintf("hidden_size=%d", h)
	b := &builder{ck: ck}

	emb := prefix + "embed_tokens"
	b.add(Layer{Module: emb, Kind: KindEmbedding, Class: "Embedding", Block: -1,
		Dims: map[string]int64{"vocab": vocab, "hidden": h}},
		need{"weight", emb + ".weight", []int64{vocab, h}, fmt.Sprintf("vocab_size=%d, %s", vocab, hidden), false})

	norm := func(module string, block int) {
		l := Layer{Module: module, Kind: KindRMSNorm, Class: f.class + "RMSNorm", Eps: c.RMSNormEps, Block: block,
			Dims: map[string]int64{"hidden": h}}
		if block >= 0 {
			l.BlockClass = f.class + "DecoderLayer"
		}
		b.add(l,
			need{"weight", module + ".weight", []int64{h}, hidden, false})
	}
	qkvBias, oBias, mlpBias := f.qkvBias(c), f.oBias(c), f.mlpBias(c)
	var sparse func(b *builder, blk string, i int) bool
	if f.sparse != nil {
		if sparse, err = f.sparse(ck, c); err != nil {
			return nil, err
		}
	}
	mlpClass := f.class + "MLP"
	if f.mlpClass != "" {
		mlpClass = f.mlpClass
	}
	var mark func(l *Layer)
	if f.mark != nil {
		if mark, err = f.mark(ck, c); err != nil {
			return nil, err
		}
	}
	for i := 0; i < int(c.NumHiddenLayers) && b.err == nil; i++ {
		blk := fmt.Sprintf("%slayers.%d", prefix, i)
		if !f.postNorms {
			norm(blk+".input_layernorm", i)
		}

		attn := blk + ".self_attn"
		needs, qWhy, kvWhy := attentionNeeds(attn, h, heads, kv, hd, hidden, qkvBias, oBias)
		l := Layer{Module: attn, Kind: KindAttention, Class: f.class + "Attention", Block: i, Bias: qkvBias || oBias,
			BlockClass: f.class + "DecoderLayer", InterleavedRotary: f.interleaved,
			Dims: map[string]int64{"hidden": h, "heads": heads, "kv_heads": kv, "head_dim": hd}}
		if f.qkNorm || f.qkNormFull {
			qn, kn := []int64{hd}, []int64{hd}
			qw, kw := fmt.Sprintf("head_dim=%d", hd), fmt.Sprintf("head_dim=%d", hd)
			if f.qkNormFull {
				qn, kn, qw, kw = []int64{heads * hd}, []int64{kv * hd}, qWhy, kvWhy
			}
			qa, ka := "q_norm", "k_norm"
			if f.qkNormAfter {
				qa, ka = "query_layernorm", "key_layernorm"
				l.QKNormAfterRope = true
			}
			needs = append(needs,
				need{"q_norm.weight", attn + "." + qa + ".weight", qn, qw, false},
				need{"k_norm.weight", attn + "." + ka + ".weight", kn, kw, false})
			l.Eps = c.RMSNormEps
			l.Children = map[string]string{qa: f.class + "RMSNorm", ka: f.class + "RMSNorm"}
		}
		b.add(l, needs...)

		norm(blk+".post_attention_layernorm", i)

		if sparse != nil && sparse(b, blk, i) {
			if f.postNorms {
				norm(blk+".post_feedforward_layernorm", i)
			}
			continue
		}
		mlp := blk + ".mlp"
		why := fmt.Sprintf("intermediate_size=%d, %s", inter, hidden)
		needs = []need{
			{"gate_proj.weight", mlp + ".gate_proj.weight", []int64{inter, h}, why, false},
			{"up_proj.weight", mlp + ".up_proj.weight", []int64{inter, h}, why, false},
			{"down_proj.weight", mlp + ".down_proj.weight", []int64{h, inter}, why, false},
		}
		if mlpBias {
			needs = append(needs,
				need{"gate_proj.bias", mlp + ".gate_proj.bias", []int64{inter}, why, false},
				need{"up_proj.bias", mlp + ".up_proj.bias", []int64{inter}, why, false},
				need{"down_proj.bias", mlp + ".down_proj.bias", []int64{h}, hidden, false})
		}
		b.add(Layer{Module: mlp, Kind: KindMLPSwiGLU, Class: mlpClass, Block: i, Bias: mlpBias,
			BlockClass: f.class + "DecoderLayer", Dims: map[string]int64{"hidden": h, "intermediate": inter}}, needs...)
		if f.postNorms {
			norm(blk+".post_feedforward_layernorm", i)
		}
	}
	norm(prefix+"norm", -1)

	if lmHead {
		b.lmHead(Layer{Module: "lm_head", Kind: KindLMHead, Class: "Linear", Block: -1,
			Dims: map[string]int64{"vocab": vocab, "hidden": h}}, emb, c.TieWordEmbeddings, hidden)
	}
	if mark != nil {
		for i := range b.layers {
			mark(&b.layers[i])
		}
	}
	return b.graph(func(name string) bool {
		if c.TieWordEmbeddings && name == "lm_head.weight" {
			return true
		}
		for _, s := range f.ignore {
			if strings.HasSuffix(name, s) {
				return true
			}
		}
		return false
	})
}
