package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Phi-3 and Phi-4-mini (model_type "phi3"). Read against transformers 5.17
// models/phi3/{configuration,modeling}_phi3.py. The checkpoint stores the attention's q/k/v
// and the MLP's gate/up already fused, so the layers own those tensors as they are:
//
//	embed_tokens                        embedding   Embedding       weight [vocab, hidden]
//	layers.i.input_layernorm            rmsnorm     Phi3RMSNorm     weight [hidden]
//	layers.i.self_attn                  attention   Phi3Attention   qkv_proj.weight [(H + 2·KV)·D, hidden] (q rows, then k, then v), o_proj.weight
//	layers.i.post_attention_layernorm   rmsnorm     Phi3RMSNorm     weight [hidden]
//	layers.i.mlp                        mlp-swiglu  Phi3MLP         gate_up_proj.weight [2·I, hidden] (gate rows, then up), down_proj.weight
//	norm                                rmsnorm     Phi3RMSNorm     weight [hidden]
//	lm_head                             lm-head     Linear          weight, or the embedding when tied (Phi-4-mini)
//
// head_dim is hidden_size / num_attention_heads (Phi3Config has no head_dim). No projection
// has a bias. Attention dims add "rotary_dim" when partial_rotary_factor < 1 (Phi-4-mini:
// 0.75) and "sliding_window" when config.json sets one; Rope is "longrope" for LongRoPE.

// phi3Config is the part of config.json the layers depend on.
type phi3Config struct {
	VocabSize         int64   `json:"vocab_size"`
	HiddenSize        int64   `json:"hidden_size"`
	IntermediateSize  int64   `json:"intermediate_size"`
	NumHiddenLayers   int64   `json:"num_hidden_layers"`
	NumAttentionHeads int64   `json:"num_attention_heads"`
	NumKeyValueHeads  optInt  `json:"num_key_value_heads"`
	RMSNormEps        float64 `json:"rms_norm_eps"`
	TieWordEmbeddings bool    `json:"tie_word_embeddings"`
	SlidingWindow     optInt  `json:"sliding_window"`
	HiddenAct         string  `json:"hidden_act"`
	// Hub configs spell RoPE as rope_scaling (+ top-level rope_theta, partial_rotary_factor);
	// configs saved by transformers 5.17 as rope_parameters. Phi3Config takes rope_scaling
	// when set, else rope_parameters (convert_rope_params_to_dict).
	RopeScaling         json.RawMessage `json:"rope_scaling"`
	RopeParameters      json.RawMessage `json:"rope_parameters"`
	PartialRotaryFactor *float64        `json:"partial_rotary_factor"`
}

// ropeSpec is a rope_scaling / rope_parameters object (modeling_rope_utils.py): the type
// under its old ("type") or new ("rope_type") key.
type ropeSpec struct {
	Type                string   `json:"type"`
	RopeType            string   `json:"rope_type"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
}

// rope reads the effective RoPE type and partial rotary factor as Phi3Config resolves them.
func (c *phi3Config) rope(ck *Checkpoint) (typ string, partial float64, err error) {
	typ, partial, err = readRope(ck, c.RopeScaling, c.RopeParameters, c.PartialRotaryFactor, 1)
	if err != nil {
		return "", 0, err
	}
	switch typ {
	case "default":
	case "su", "yarn", "longrope": // Phi3Config renames the first two to longrope
		typ = "longrope"
	default:
		return "", 0, configError(ck, "rope type %q: Phi3Config accepts default and longrope", typ)
	}
	return typ, partial, nil
}

// readRope reads a config's RoPE type ("default" when unset) and partial rotary factor as
// transformers 5.17 resolves them (convert_rope_params_to_dict): rope_scaling when set, else
// rope_parameters; a factor inside that object, else the top-level one, else def.
func readRope(ck *Checkpoint, scaling, params json.RawMessage, top *float64, def float64) (typ string, partial float64, err error) {
	raw := scaling
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = params
	}
	var s ropeSpec
	if t := bytes.TrimSpace(raw); len(t) > 0 && string(t) != "null" {
		if err := json.Unmarshal(t, &s); err != nil {
			return "", 0, configError(ck, "rope_scaling / rope_parameters: %s", JSONError(err))
		}
	}
	typ = s.RopeType
	if typ == "" {
		typ = s.Type
	}
	if typ == "" {
		typ = "default"
	}
	partial = def
	switch {
	case s.PartialRotaryFactor != nil:
		partial = *s.PartialRotaryFactor
	case top != nil:
		partial = *top
	}
	if !(partial > 0 && partial <= 1) {
		return "", 0, configError(ck, "partial_rotary_factor is %v, want 0 < f <= 1", partial)
	}
	return typ, partial, nil
}

var phi3Defaults = phi3Config{
	VocabSize: 32064, HiddenSize: 3072, IntermediateSize: 8192, NumHiddenLayers: 32,
	NumAttentionHeads: 32, RMSNormEps: 1e-5, HiddenAct: "silu",
}

func init() { Register(Architecture{ModelTypes: []string{"phi3"}, Build: buildPhi3}) }

func buildPhi3(ck *Checkpoint) (*Graph, error) {
	c := phi3Defaults
	if err := decodeConfig(ck, &c); err != nil {
		return nil, err
	}
	if !c.NumKeyValueHeads.Set || c.NumKeyValueHeads.Null || c.NumKeyValueHeads.V == 0 {
		c.NumKeyValueHeads.V = c.NumAttentionHeads
	}
	if err := checkDecoderSizes(ck, c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads,
		c.NumKeyValueHeads.V, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	h, heads, kv := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads.V
	if h%heads != 0 || heads%kv != 0 {
		return nil, configError(ck, "hidden_size %d, num_attention_heads %d, num_key_value_heads %d: "+
			"want hidden a multiple of heads and heads a multiple of kv heads", h, heads, kv)
	}
	if c.HiddenAct != "silu" {
		return nil, configError(ck, "hidden_act is %q; Phi-3's MLP here computes silu", c.HiddenAct)
	}
	ropeType, partial, err := c.rope(ck)
	if err != nil {
		return nil, err
	}
	hd := h / heads
	rotary := int64(float64(hd) * partial) // int(head_dim * partial_rotary_factor), as Phi3RotaryEmbedding
	window := c.SlidingWindow.V
	if c.SlidingWindow.Null || window < 0 {
		window = 0
	}
	prefix, lmHead := "model.", true
	switch cls := mainClass(ck); cls {
	case "", "Phi3ForCausalLM":
	case "Phi3Model":
		prefix, lmHead = "", false
	default:
		return nil, fmt.Errorf("%w: %s: %q (supported: Phi3ForCausalLM, Phi3Model)", ErrUnsupportedHead, ck.Dir, cls)
	}
	inter, vocab := c.IntermediateSize, c.VocabSize
	hidden := fmt.Sprintf("hidden_size=%d", h)
	b := &builder{ck: ck}
	emb := prefix + "embed_tokens"
	b.add(Layer{Module: emb, Kind: KindEmbedding, Class: "Embedding", Block: -1,
		Dims: map[string]int64{"vocab": vocab, "hidden": h}},
		need{"weight", emb + ".weight", []int64{vocab, h}, fmt.Sprintf("vocab_size=%d, %s", vocab, hidden), false})
	norm := func(module string, blk int) {
		l := Layer{Module: module, Kind: KindRMSNorm, Class: "Phi3RMSNorm", Eps: c.RMSNormEps, Block: blk,
			Dims: map[string]int64{"hidden": h}}
		if blk >= 0 {
			l.BlockClass = "Phi3DecoderLayer"
		}
		b.add(l, need{"weight", module + ".weight", []int64{h}, hidden, false})
	}
	for i := 0; i < int(c.NumHiddenLayers) && b.err == nil; i++ {
		blk := fmt.Sprintf("%slayers.%d", prefix, i)
		norm(blk+".input_layernorm", i)
		attn := blk + ".self_attn"
		qkvWhy := fmt.Sprintf("(num_attention_heads=%d + 2 × num_key_value_heads=%d) × head_dim=%d, %s", heads, kv, hd, hidden)
		l := Layer{Module: attn, Kind: KindAttention, Class: "Phi3Attention", Block: i, BlockClass: "Phi3DecoderLayer",
			Dims: map[string]int64{"hidden": h, "heads": heads, "kv_heads": kv, "head_dim": hd}}
		if rotary < hd {
			l.Dims["rotary_dim"] = rotary
		}
		if window > 0 {
			l.Dims["sliding_window"] = window
		}
		if ropeType != "default" {
			l.Rope = ropeType
		}
		b.add(l,
			need{"qkv_proj.weight", attn + ".qkv_proj.weight", []int64{(heads + 2*kv) * hd, h}, qkvWhy, false},
			need{"o_proj.weight", attn + ".o_proj.weight", []int64{h, heads * hd},
				fmt.Sprintf("num_attention_heads=%d × head_dim=%d, %s", heads, hd, hidden), false})
		norm(blk+".post_attention_layernorm", i)
		mlp := blk + ".mlp"
		why := fmt.Sprintf("intermediate_size=%d, %s", inter, hidden)
		b.add(Layer{Module: mlp, Kind: KindMLPSwiGLU, Class: "Phi3MLP", Block: i, BlockClass: "Phi3DecoderLayer",
			Dims: map[string]int64{"hidden": h, "intermediate": inter}},
			need{"gate_up_proj.weight", mlp + ".gate_up_proj.weight", []int64{2 * inter, h}, "2 × " + why, false},
			need{"down_proj.weight", mlp + ".down_proj.weight", []int64{h, inter}, why, false})
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
