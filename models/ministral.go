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
	return layerWindows(ck, c.NumHiddenLayers, func(int) bool { return true })
}
