package models

// SmolLM3 (model_type "smollm3"): Llama's layers under SmolLM3* class names, where some
// layers apply no RoPE. Read against transformers 5.17 models/smollm3:
//   - no_rope_layers holds 1 for a layer that rotates q and k and 0 for a NoPE layer
//     (SmolLM3Attention.use_rope); left out, every no_rope_layer_interval-th layer (default
//     4) is NoPE. A NoPE attention carries Rope RopeNone.
//   - With use_sliding_window, the layers layer_types names sliding_attention attend within
//     sliding_window (Dims "sliding_window"); left out, those are the NoPE layers when a
//     window is set (SmolLM3Config.__post_init__). Other layers attend in full.
//   - attention_bias switches all four projection biases and mlp_bias the MLP's;
//     num_key_value_heads defaults to 4 and the embeddings are tied by default.
var smollm3 = llamaFamily{
	modelType: "smollm3",
	class:     "SmolLM3",
	defaults: llamaConfig{
		VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 11008, NumHiddenLayers: 36,
		NumAttentionHeads: 16, RMSNormEps: 1e-6, TieWordEmbeddings: true,
	},
	kvHeadsDefault: 4,
	qkvBias:        attentionBias,
	oBias:          attentionBias,
	mlpBias:        mlpBiased,
	ignore:         []string{".rotary_emb.inv_freq"},
	mark:           smollm3Attention,
	layerWindows:   true,
}

func init() { registerLlamaFamily(smollm3) }

// smollm3Config is the part of config.json that sets each layer's RoPE and window.
type smollm3Config struct {
	NoRopeLayers        []int64  `json:"no_rope_layers"`
	NoRopeLayerInterval int64    `json:"no_rope_layer_interval"`
	UseSlidingWindow    bool     `json:"use_sliding_window"`
	SlidingWindow       optInt   `json:"sliding_window"`
	LayerTypes          []string `json:"layer_types"`
}

// smollm3Attention marks each attention layer's RoPE and window.
func smollm3Attention(ck *Checkpoint, c *llamaConfig) (func(l *Layer), error) {
	s := smollm3Config{NoRopeLayerInterval: 4}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	n := int(c.NumHiddenLayers)
	rope := make([]bool, n)
	switch {
	case s.NoRopeLayers == nil:
		if s.NoRopeLayerInterval <= 0 {
			return nil, configError(ck, "no_rope_layer_interval is %d, want a positive interval", s.NoRopeLayerInterval)
		}
		for i := range rope {
			rope[i] = int64(i+1)%s.NoRopeLayerInterval != 0
		}
	case len(s.NoRopeLayers) != n:
		return nil, configError(ck, "no_rope_layers has %d entries, num_hidden_layers is %d", len(s.NoRopeLayers), n)
	default:
		for i, v := range s.NoRopeLayers {
			if v != 0 && v != 1 {
				return nil, configError(ck, "no_rope_layers[%d] is %d (want 1 for a layer with RoPE, 0 for one without)", i, v)
			}
			rope[i] = v == 1
		}
	}
	var window int64
	if s.UseSlidingWindow && s.SlidingWindow.Set {
		var err error
		if window, err = slidingWindow(ck, s.SlidingWindow); err != nil {
			return nil, err
		}
	}
	if err := checkLayerTypes(ck, s.LayerTypes, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	sliding := make([]bool, n)
	for i := range sliding {
		if s.LayerTypes == nil {
			sliding[i] = window > 0 && !rope[i]
		} else {
			sliding[i] = s.LayerTypes[i] == "sliding_attention"
		}
	}
	return func(l *Layer) {
		i := l.Block
		if l.Kind != KindAttention || i < 0 {
			return
		}
		if !rope[i] {
			l.Rope = RopeNone
		}
		if window > 0 && sliding[i] {
			l.Dims["sliding_window"] = window
		}
	}, nil
}
