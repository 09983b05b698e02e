package models

import (
	"encoding/json"
	"fmt"
	"strings"
)

// GLM (model_type "glm": THUDM/glm-4-9b-chat-hf) and the base of GLM-4 (glm4.go). Read
// against transformers 5.17 models/glm/{configuration,modeling}_glm.py:
//
//	embed_tokens                        embedding   Embedding      weight [vocab, hidden]
//	layers.i.input_layernorm            rmsnorm     GlmRMSNorm     weight [hidden]
//	layers.i.self_attn                  attention   GlmAttention   {q,k,v}_proj.weight (+ .bias), o_proj.weight
//	layers.i.post_attention_layernorm   rmsnorm     GlmRMSNorm     weight [hidden]
//	layers.i.mlp                        mlp-swiglu  GlmMLP         gate_up_proj.weight [2·I, hidden] (gate rows, then up), down_proj.weight
//	norm                                rmsnorm     GlmRMSNorm     weight [hidden]
//	lm_head                             lm-head     Linear         weight, or the embedding when tied
//
// The norm is Llama's. attention_bias (default true) gives q/k/v a bias; o_proj never has
// one. RoPE rotates the first int(head_dim · partial_rotary_factor) channels of each head
// (default factor 0.5) in adjacent pairs (2i, 2i+1) (apply_rotary_pos_emb's interleaved
// cos/sin): the attention carries InterleavedRotary, and "rotary_dim" when fewer than
// head_dim rotate. head_dim defaults to 128, not hidden / heads.

// glmConfig is the part of config.json the layers depend on.
type glmConfig struct {
	VocabSize           int64           `json:"vocab_size"`
	HiddenSize          int64           `json:"hidden_size"`
	IntermediateSize    int64           `json:"intermediate_size"`
	NumHiddenLayers     int64           `json:"num_hidden_layers"`
	NumAttentionHeads   int64           `json:"num_attention_heads"`
	NumKeyValueHeads    optInt          `json:"num_key_value_heads"`
	HeadDim             optInt          `json:"head_dim"`
	RMSNormEps          float64         `json:"rms_norm_eps"`
	TieWordEmbeddings   bool            `json:"tie_word_embeddings"`
	AttentionBias       bool            `json:"attention_bias"`
	HiddenAct           string          `json:"hidden_act"`
	RopeScaling         json.RawMessage `json:"rope_scaling"`
	RopeParameters      json.RawMessage `json:"rope_parameters"`
	PartialRotaryFactor *float64        `json:"partial_rotary_factor"`
}

// glmFamily is what GLM and GLM-4 differ in.
type glmFamily struct {
	modelType string
	// class is the transformers class prefix (Glm → GlmRMSNorm, GlmForCausalLM).
	class string
	// sandwich: the block also normalizes each branch's output before its residual add,
	// post_self_attn_layernorm after the attention and post_mlp_layernorm after the MLP
	// (Glm4DecoderLayer.forward).
	sandwich bool
}

// The config classes' defaults (GlmConfig and Glm4Config agree): GLM-4-9B's shape.
var glmDefaults = glmConfig{
	VocabSize: 151552, HiddenSize: 4096, IntermediateSize: 13696, NumHiddenLayers: 40,
	NumAttentionHeads: 32, NumKeyValueHeads: optInt{Set: true, V: 2}, HeadDim: optInt{Set: true, V: 128},
	RMSNormEps: 1.5625e-07, AttentionBias: true, HiddenAct: "silu",
}

var glm = glmFamily{modelType: "glm", class: "Glm"}

func init() { registerGLMFamily(glm) }

func registerGLMFamily(f glmFamily) {
	Register(Architecture{ModelTypes: []string{f.modelType}, Build: f.build})
}

func (f glmFamily) config(ck *Checkpoint) (*glmConfig, error) {
	c := glmDefaults
	if err := decodeConfig(ck, &c); err != nil {
		return nil, err
	}
	if !c.NumKeyValueHeads.Set || c.NumKeyValueHeads.Null || c.NumKeyValueHeads.V == 0 {
		c.NumKeyValueHeads.V = c.NumAttentionHeads
	}
	if err := checkDecoderHeads(ck, c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads,
		c.NumKeyValueHeads.V, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	if c.HeadDim.Null || c.HeadDim.V == 0 {
		c.HeadDim.V = c.HiddenSize / c.NumAttentionHeads
	}
	if c.HeadDim.V <= 0 {
		return nil, configError(ck, "head_dim is %d", c.HeadDim.V)
	}
	if c.HiddenAct != "silu" {
		return nil, configError(ck, "hidden_act is %q; the GLM MLP here computes silu", c.HiddenAct)
	}
	return &c, nil
}

func (f glmFamily) build(ck *Checkpoint) (*Graph, error) {
	c, err := f.config(ck)
	if err != nil {
		return nil, err
	}
	ropeType, partial, err := readRope(ck, c.RopeScaling, c.RopeParameters, c.PartialRotaryFactor, 0.5)
	if err != nil {
		return nil, err
	}
	h, heads, kv, hd := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads.V, c.HeadDim.V
	// int(head_dim * partial_rotary_factor), as GlmRotaryEmbedding computes its dim; the
	// pairs need an even count.
	rotary := int64(float64(hd) * partial)
	if rotary%2 != 0 {
		return nil, configError(ck, "head_dim %d × partial_rotary_factor %v rotates %d channels, want an even count",
			hd, partial, rotary)
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
	inter, vocab := c.IntermediateSize, c.VocabSize
	hidden := fmt.Sprintf("hidden_size=%d", h)
	block := f.class + "DecoderLayer"
	b := &builder{ck: ck}
	emb := prefix + "embed_tokens"
	b.add(Layer{Module: emb, Kind: KindEmbedding, Class: "Embedding", Block: -1,
		Dims: map[string]int64{"vocab": vocab, "hidden": h}},
		need{"weight", emb + ".weight", []int64{vocab, h}, fmt.Sprintf("vocab_size=%d, %s", vocab, hidden), false})
	norm := func(module string, blk int) {
		l := Layer{Module: module, Kind: KindRMSNorm, Class: f.class + "RMSNorm", Eps: c.RMSNormEps, Block: blk,
			Dims: map[string]int64{"hidden": h}}
		if blk >= 0 {
			l.BlockClass = block
		}
		b.add(l, need{"weight", module + ".weight", []int64{h}, hidden, false})
	}
	for i := 0; i < int(c.NumHiddenLayers) && b.err == nil; i++ {
		blk := fmt.Sprintf("%slayers.%d", prefix, i)
		norm(blk+".input_layernorm", i)

		attn := blk + ".self_attn"
		needs, _, _ := attentionNeeds(attn, h, heads, kv, hd, hidden, c.AttentionBias, false)
		l := Layer{Module: attn, Kind: KindAttention, Class: f.class + "Attention", Block: i, Bias: c.AttentionBias,
			BlockClass: block, InterleavedRotary: true,
			Dims: map[string]int64{"hidden": h, "heads": heads, "kv_heads": kv, "head_dim": hd}}
		if rotary < hd {
			l.Dims["rotary_dim"] = rotary
		}
		// Rotary embeddings whose factors follow the sequence length on the host.
		if ropeType == "longrope" || ropeType == "dynamic" {
			l.Rope = ropeType
		}
		b.add(l, needs...)
		if f.sandwich {
			norm(blk+".post_self_attn_layernorm", i)
		}
		norm(blk+".post_attention_layernorm", i)

		mlp := blk + ".mlp"
		why := fmt.Sprintf("intermediate_size=%d, %s", inter, hidden)
		b.add(Layer{Module: mlp, Kind: KindMLPSwiGLU, Class: f.class + "MLP", Block: i, BlockClass: block,
			Dims: map[string]int64{"hidden": h, "intermediate": inter}},
			need{"gate_up_proj.weight", mlp + ".gate_up_proj.weight", []int64{2 * inter, h}, "2 × " + why, false},
			need{"down_proj.weight", mlp + ".down_proj.weight", []int64{h, inter}, why, false})
		if f.sandwich {
			norm(blk+".post_mlp_layernorm", i)
		}
	}
	norm(prefix+"norm", -1)
	if lmHead {
		b.lmHead(Layer{Module: "lm_head", Kind: KindLMHead, Class: "Linear", Block: -1,
			Dims: map[string]int64{"vocab": vocab, "hidden": h}}, emb, c.TieWordEmbeddings, hidden)
	}
	return b.graph(func(name string) bool {
		return (c.TieWordEmbeddings && name == "lm_head.weight") || strings.HasSuffix(name, ".rotary_emb.inv_freq")
	})
}
