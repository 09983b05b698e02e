package models

// OLMo 3 (model_type "olmo3"): OLMo 2's block (olmo2.go) with sliding-window layers. Read
// against transformers 5.17 models/olmo3/{configuration,modeling}_olmo3.py:
//   - layer_types names each layer sliding_attention or full_attention; left out, every
//     fourth layer is full (Olmo3Config.__post_init__). A sliding layer attends within
//     sliding_window (default 4096; null: in full), Dims "sliding_window".
//   - The two layer types may carry their own RoPE parameters (rope_parameters by type); their
//     cos/sin reach the attention from the model's rotary module.
var olmo3 = func() llamaFamily {
	f := olmo2
	f.modelType, f.class = "olmo3", "Olmo3"
	f.mark, f.layerWindows = olmo3Layers, true
	return f
}()

func init() { registerLlamaFamily(olmo3) }

// olmo3Layers marks OLMo 2's kinds and each sliding layer's window.
func olmo3Layers(ck *Checkpoint, c *llamaConfig) (func(l *Layer), error) {
	norms, err := olmo2Layers(ck, c)
	if err != nil {
		return nil, err
	}
	windows, err := layerWindows(ck, c.NumHiddenLayers, func(i int) bool { return (i+1)%4 != 0 })
	if err != nil {
		return nil, err
	}
	return func(l *Layer) {
		norms(l)
		windows(l)
	}, nil
}
