package models

import (
	"fmt"
	"strings"
)

// Gemma 2 (model_type "gemma2") and the base of Gemma 3's text model (gemma3.go). Read
// against transformers 5.17 models/gemma2/{configuration,modeling}_gemma2.py.
//
// Layers, in execution order (prefix "model." for *ForCausalLM, none for the bare model):
//
//	embed_tokens                          embedding      <P>TextScaledWordEmbedding  weight [vocab, hidden] (output × √hidden)
//	layers.i.input_layernorm              rmsnorm-gemma  <P>RMSNorm    weight [hidden]
//	layers.i.self_attn                    attention      <P>Attention  {q,k,v,o}_proj.weight (+ .bias), q_norm/k_norm.weight (gemma3)
//	layers.i.post_attention_layernorm     rmsnorm-gemma  <P>RMSNorm    weight [hidden]
//	layers.i.pre_feedforward_layernorm    rmsnorm-gemma  <P>RMSNorm    weight [hidden]
//	layers.i.mlp                          mlp-geglu      <P>MLP        {gate,up,down}_proj.weight
//	layers.i.post_feedforward_layernorm   rmsnorm-gemma  <P>RMSNorm    weight [hidden]
//	norm                                  rmsnorm-gemma  <P>RMSNorm    weight [hidden]
//	lm_head                               lm-head        Linear        the embedding when tied (the default), else weight
//
// Every norm computes x/rms(x) · (1 + w) in fp32 and rounds once. The decoder block adds the
// residual after post_attention_layernorm and after post_feedforward_layernorm, so the add
// that precedes a norm is the one before pre_feedforward_layernorm. The embedding's √hidden
// scale is applied in its forward, not stored: a tied lm_head reads the table unscaled.
// Sliding layers (layer_types) carry Dims "sliding_window"; Softcap on attention is
// attn_logit_softcapping, on the lm-head final_logit_softcapping.

// gemmaConfig is the part of config.json that shapes the weights and the attention.
type gemmaConfig struct {
	VocabSize         int64    `json:"vocab_size"`
	HiddenSize        int64    `json:"hidden_size"`
	IntermediateSize  int64    `json:"intermediate_size"`
	NumHiddenLayers   int64    `json:"num_hidden_layers"`
	NumAttentionHeads int64    `json:"num_attention_heads"`
	NumKeyValueHeads  optInt   `json:"num_key_value_heads"`
	HeadDim           optInt   `json:"head_dim"`
	RMSNormEps        float64  `json:"rms_norm_eps"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
	AttentionBias     bool     `json:"attention_bias"`
	SlidingWindow     optInt   `json:"sliding_window"`
	LayerTypes        []string `json:"layer_types"`
	// SlidingWindowPattern is Gemma 3's older spelling of layer_types: every Nth layer is
	// full attention (Gemma3TextConfig.__post_init__, default 6).
	SlidingWindowPattern int64 `json:"sliding_window_pattern"`
	// The soft-capping caps; null (nil) means none.
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
	AttnLogitSoftcapping  *float64 `json:"attn_logit_softcapping"`
	// HiddenActivation is what Gemma's MLP reads (ACT2FN[config.hidden_activation]);
	// Hub configs also carry hidden_act, which the modeling code ignores.
	HiddenActivation string `json:"hidden_activation"`
}

// gemmaFamily is what Gemma 2 and Gemma 3 differ in.
type gemmaFamily struct {
	modelType string
	// class is the transformers class prefix (Gemma2 → Gemma2RMSNorm); bare is the base
	// model class a checkpoint may be saved from (Gemma2Model, Gemma3TextModel).
	class, bare string
	defaults    gemmaConfig
	// sliding says whether layer i is a sliding-window layer when config.json has no
	// layer_types (each config class's __post_init__).
	sliding func(c *gemmaConfig, i int64) bool
	// qkNorm: q_norm/k_norm over head_dim, in Gemma's (1 + w) form (Gemma 3).
	qkNorm bool
}

func f64(v float64) *float64 { return &v }

// gemma2: Gemma2Config defaults (configuration_gemma2.py); odd layers (0-based even
// indices) slide.
var gemma2 = gemmaFamily{
	modelType: "gemma2",
	class:     "Gemma2",
	bare:      "Gemma2Model",
	defaults: gemmaConfig{
		VocabSize: 256000, HiddenSize: 2304, IntermediateSize: 9216, NumHiddenLayers: 26,
		NumAttentionHeads: 8, NumKeyValueHeads: optInt{Set: true, V: 4}, HeadDim: optInt{Set: true, V: 256},
		RMSNormEps: 1e-6, TieWordEmbeddings: true, SlidingWindow: optInt{Set: true, V: 4096},
		FinalLogitSoftcapping: f64(30), AttnLogitSoftcapping: f64(50), HiddenActivation: "gelu_pytorch_tanh",
	},
	sliding: func(_ *gemmaConfig, i int64) bool { return (i+1)%2 != 0 },
}

func init() { registerGemmaFamily(gemma2) }

func registerGemmaFamily(f gemmaFamily) {
	Register(Architecture{ModelTypes: []string{f.modelType}, Build: f.build, LayerWindows: true})
}

func (f gemmaFamily) config(ck *Checkpoint) (*gemmaConfig, error) {
	c := f.defaults
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
	// Every Gemma 2 and 3 checkpoint uses the tanh approximation; the mlp-geglu kind and
	// its GEMM epilogue compute exactly that.
	if c.HiddenActivation != "gelu_pytorch_tanh" {
		return nil, configError(ck, "hidden_activation is %q; the Gemma MLP here computes gelu_pytorch_tanh",
			c.HiddenActivation)
	}
	if c.HeadDim.Null || c.HeadDim.V == 0 {
		c.HeadDim.V = c.HiddenSize / c.NumAttentionHeads
	}
	if c.HeadDim.V <= 0 {
		return nil, configError(ck, "head_dim is %d", c.HeadDim.V)
	}
	if c.SlidingWindow.Null {
		c.SlidingWindow.V = 0
	}
	if c.SlidingWindow.V < 0 {
		return nil, configError(ck, "sliding_window is %d", c.SlidingWindow.V)
	}
	if err := checkLayerTypes(ck, c.LayerTypes, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name string
		v    *float64
	}{{"final_logit_softcapping", c.FinalLogitSoftcapping}, {"attn_logit_softcapping", c.AttnLogitSoftcapping}} {
		if s.v != nil && !(*s.v > 0) {
			return nil, configError(ck, "%s is %v, want a positive cap or null", s.name, *s.v)
		}
	}
	return &c, nil
}

// window is layer i's sliding window, 0 for a full-attention layer.
func (f gemmaFamily) window(c *gemmaConfig, i int64) int64 {
	slides := f.sliding(c, i)
	if c.LayerTypes != nil {
		slides = c.LayerTypes[i] == "sliding_attention"
	}
	if !slides {
		return 0
	}
	return c.SlidingWindow.V
}

func (f gemmaFamily) build(ck *Checkpoint) (*Graph, error) {
	c, err := f.config(ck)
	if err != nil {
		return nil, err
	}
	prefix, lmHead := "model.", true
	switch cls := mainClass(ck); cls {
	case "", f.class + "ForCausalLM":
	case f.bare:
		prefix, lmHead = "", false
	default:
		return nil, fmt.Errorf("%w: %s: %q (supported: %sForCausalLM, %s)",
			ErrUnsupportedHead, ck.Dir, cls, f.class, f.bare)
	}
	h, heads, kv, hd := c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads.V, c.HeadDim.V
	inter, vocab := c.IntermediateSize, c.VocabSize
	hidden := fmt.Sprintf("hidden_size=%d", h)
	block := f.class + "DecoderLayer"
	b := &builder{ck: ck}

	emb := prefix + "embed_tokens"
	b.add(Layer{Module: emb, Kind: KindEmbedding, Class: f.class + "TextScaledWordEmbedding", Block: -1,
		Dims: map[string]int64{"vocab": vocab, "hidden": h}},
		need{"weight", emb + ".weight", []int64{vocab, h}, fmt.Sprintf("vocab_size=%d, %s", vocab, hidden), false})

	norm := func(module string, blk int) {
		l := Layer{Module: module, Kind: KindRMSNormGemma, Class: f.class + "RMSNorm", Eps: c.RMSNormEps, Block: blk,
			Dims: map[string]int64{"hidden": h}}
		if blk >= 0 {
			l.BlockClass = block
		}
		b.add(l, need{"weight", module + ".weight", []int64{h}, hidden, false})
	}
	for i := int64(0); i < c.NumHiddenLayers && b.err == nil; i++ {
		blk := fmt.Sprintf("%slayers.%d", prefix, i)
		norm(blk+".input_layernorm", int(i))

		attn := blk + ".self_attn"
		needs, _, _ := attentionNeeds(attn, h, heads, kv, hd, hidden, c.AttentionBias, c.AttentionBias)
		l := Layer{Module: attn, Kind: KindAttention, Class: f.class + "Attention", Block: int(i), Bias: c.AttentionBias,
			BlockClass: block, Dims: map[string]int64{"hidden": h, "heads": heads, "kv_heads": kv, "head_dim": hd}}
		if w := f.window(c, i); w > 0 {
			l.Dims["sliding_window"] = w
		}
		if c.AttnLogitSoftcapping != nil {
			l.Softcap = *c.AttnLogitSoftcapping
		}
		if f.qkNorm {
			why := fmt.Sprintf("head_dim=%d", hd)
			needs = append(needs,
				need{"q_norm.weight", attn + ".q_norm.weight", []int64{hd}, why, false},
				need{"k_norm.weight", attn + ".k_norm.weight", []int64{hd}, why, false})
			l.Eps = c.RMSNormEps
			l.Children = map[string]string{"q_norm": f.class + "RMSNorm", "k_norm": f.class + "RMSNorm"}
		}
		b.add(l, needs...)

		norm(blk+".post_attention_layernorm", int(i))
		norm(blk+".pre_feedforward_layernorm", int(i))

		mlp := blk + ".mlp"
		why := fmt.Sprintf("intermediate_size=%d, %s", inter, hidden)
		b.add(Layer{Module: mlp, Kind: KindMLPGeGLU, Class: f.class + "MLP", Block: int(i), BlockClass: block,
			Dims: map[string]int64{"hidden": h, "intermediate": inter}},
			need{"gate_proj.weight", mlp + ".gate_proj.weight", []int64{inter, h}, why, false},
			need{"up_proj.weight", mlp + ".up_proj.weight", []int64{inter, h}, why, false},
			need{"down_proj.weight", mlp + ".down_proj.weight", []int64{h, inter}, why, false})

		norm(blk+".post_feedforward_layernorm", int(i))
	}
	norm(prefix+"norm", -1)

	if lmHead {
		head := Layer{Module: "lm_head", Kind: KindLMHead, Class: "Linear", Block: -1,
			Dims: map[string]int64{"vocab": vocab, "hidden": h}}
		if c.FinalLogitSoftcapping != nil {
			head.Softcap = *c.FinalLogitSoftcapping
		}
		b.lmHead(head, emb, c.TieWordEmbeddings, hidden)
	}
	return b.graph(func(name string) bool {
		return (c.TieWordEmbeddings && name == "lm_head.weight") || strings.HasSuffix(name, ".rotary_emb.inv_freq")
	})
}
