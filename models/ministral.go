package models

// Ministral (model_type "ministral": mistralai/Ministral-8B-Instruct-2410 converted for it).
// Mistral's modules under Ministral* class names, with a window per layer. Read against
// transformers 5.17 models/ministral/{configuration,modeling}_ministral.py:
//   - layer_types names each layer sliding_attention or full_attention; left out, every layer
//     slides when sliding_window is set and none does when it is null
//     (MinistralConfig.__post_init__). A sliding layer attends within sliding_window (default
//     4096), Dims "sliding_window"; MinistralAttention keeps the window only there.
//   - No projection has a bias (MinistralAttention rebuilds Qwen2's q/k/v without one).
var ministral = func() llamaFamily {
	f := mistral
	f.modelType, f.class = "ministral", "Ministral"
	f.mark, f.layerWindows = ministralLayers, true
	return f
}()

func init() { registerLlamaFamily(ministral) }

// ministralLayers marks each sliding layer's window.
func ministralLayers(ck *Checkpoint, c *llamaConfig) (func(l *Layer), error) {
	s := struct {
		SlidingWindow optInt   `json:"sliding_window"`
		LayerTypes    []string `json:"layer_types"`
	}{SlidingWindow: optInt{Set: true, V: 4096}}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	window, err := slidingWindow(ck, s.SlidingWindow)
	if err != nil {
		return nil, err
	}
	if err := checkLayerTypes(ck, s.LayerTypes, c.NumHiddenLayers); err != nil {
		return nil, err
	}
	return func(l *Layer) {
		i := l.Block
		if l.Kind != KindAttention || i < 0 || window == 0 {
			return
		}
		if s.LayerTypes == nil || s.LayerTypes[i] == "sliding_attention" {
			l.Dims["sliding_window"] = window
		}
	}, nil
}
