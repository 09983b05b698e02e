package models

import (
	"bytes"
	"encoding/json"
)

// EXAONE 4.0 (model_type "exaone4"): OLMo 2's block on Llama's norms, Qwen3's per-head q/k
// norms, and sliding-window layers beside global NoPE ones. Read against transformers 5.17
// models/exaone4/{configuration,modeling}_exaone4.py:
//   - The block has no input norm; it normalizes each branch's output before the residual
//     add: post_attention_layernorm after the attention, post_feedforward_layernorm after the
//     MLP (Exaone4DecoderLayer.forward). Exaone4RMSNorm is LlamaRMSNorm (rounded before the
//     weight).
//   - q_norm and k_norm normalize each head over head_dim before RoPE.
//   - With sliding_window set, the layers layer_types names sliding_attention attend within
//     it and rotate q and k; the others attend in full with no RoPE (Exaone4Attention: "global
//     NoPE"). With sliding_window null every layer rotates and attends in full.
//   - layer_types left out: every sliding_window_pattern-th layer (default 4) is full
//     (Exaone4Config.__post_init__, which reads only an integer pattern).
//   - head_dim defaults to hidden_size / num_attention_heads; no projection has a bias;
//     num_key_value_heads defaults to 32 and the embeddings are untied by default.
var exaone4 = llamaFamily{
	modelType: "exaone4",
	class:     "Exaone4",
	defaults: llamaConfig{
		VocabSize: 102400, HiddenSize: 4096, IntermediateSize: 16384, NumHiddenLayers: 32,
		NumAttentionHeads: 32, RMSNormEps: 1e-5,
	},
	kvHeadsDefault: 32,
	qkvBias:        never,
	oBias:          never,
	mlpBias:        never,
	qkNorm:         true,
	postNorms:      true,
	ignore:         []string{".rotary_emb.inv_freq"},
	mark:           exaone4Layers,
	layerWindows:   true,
}

func init() { registerLlamaFamily(exaone4) }

// exaone4Config is the part of config.json that sets each layer's window and RoPE.
type exaone4Config struct {
	HiddenAct            string          `json:"hidden_act"`
	SlidingWindow        optInt          `json:"sliding_window"`
	SlidingWindowPattern json.RawMessage `json:"sliding_window_pattern"`
	LayerTypes           []string        `json:"layer_types"`
}

// exaone4Layers marks each sliding layer's window and each global layer's NoPE.
func exaone4Layers(ck *Checkpoint, c *llamaConfig) (func(l *Layer), error) {
	s := exaone4Config{HiddenAct: "silu", SlidingWindow: optInt{Set: true, V: 4096}}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	if s.HiddenAct != "silu" {
		return nil, configError(ck, "hidden_act is %q; the EXAONE 4 MLP here computes silu", s.HiddenAct)
	}
	window, err := slidingWindow(ck, s.SlidingWindow)
	if err != nil {
		return nil, err
	}
	if err := checkLayerTypes(ck, s.LayerTypes, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	n := int(c.NumHiddenLayers)
	sliding := make([]bool, n)
	switch {
	case window == 0:
		// every layer rotates and attends in full, whatever layer_types says
	case s.LayerTypes != nil:
		for i, t := range s.LayerTypes {
			sliding[i] = t == "sliding_attention"
		}
	default:
		pattern := int64(4)
		if p := bytes.TrimSpace(s.SlidingWindowPattern); len(p) > 0 {
			if err := json.Unmarshal(p, &pattern); err != nil || pattern <= 0 {
				return nil, configError(ck, "sliding_window_pattern is %s and layer_types is missing: want a positive "+
					"integer pattern, or layer_types naming each layer", p)
			}
		}
		for i := range sliding {
			sliding[i] = int64(i+1)%pattern != 0
		}
	}
	return func(l *Layer) {
		i := l.Block
		if l.Kind != KindAttention || i < 0 || window == 0 {
			return
		}
		if sliding[i] {
			l.Dims["sliding_window"] = window
		} else {
			l.Rope = RopeNone
		}
	}, nil
}
