package models

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// ErrQuantized: the checkpoint's weights are quantized (FP8 with block scales, GPTQ or AWQ
// packed integers, or anything config.json's quantization_config names). The planner, the
// packer and the kernels read unquantized F32, F16 and BF16 weights only.
var ErrQuantized = errors.New("models: quantized checkpoints are not supported yet")

// quantTensors are the tensor name suffixes quantization methods add beside a weight, and
// the method each belongs to (transformers' fp8, gptq and awq integrations).
var quantTensors = []struct{ suffix, method string }{
	{".weight_scale_inv", "FP8"}, // block-wise FP8 (FineGrainedFP8, DeepSeek-V3, Qwen3-FP8)
	{".weight_scale", "FP8"},     // per-tensor / per-channel FP8 (fbgemm_fp8, compressed-tensors)
	{".input_scale", "FP8"},
	{".g_idx", "GPTQ"},
	{".qweight", "GPTQ or AWQ"},
	{".qzeros", "GPTQ or AWQ"},
	{".scales", "GPTQ or AWQ"},
}

// checkQuantized refuses a quantized checkpoint with an error that names the method and
// what shows it: config.json's quantization_config, a scale or packed-integer tensor, or an
// FP8 weight.
func checkQuantized(ck *Checkpoint) error {
	var method string
	var shows []string
	if qc, ok := ck.Config["quantization_config"].(map[string]any); ok {
		m, _ := qc["quant_method"].(string)
		method = strings.ToUpper(m)
		shows = append(shows, fmt.Sprintf("config.json quantization_config.quant_method %q", m))
	} else if _, ok := ck.Config["quantization_config"]; ok {
		shows = append(shows, "config.json has a quantization_config")
	}
	for _, n := range slices.Sorted(maps.Keys(ck.Tensors)) {
		t := ck.Tensors[n]
		for _, q := range quantTensors {
			if strings.HasSuffix(n, q.suffix) {
				method = cmp.Or(method, q.method)
				shows = append(shows, fmt.Sprintf("tensor %q", n))
				break
			}
		}
		if t.DType == F8E4M3 || t.DType == F8E5M2 {
			method = cmp.Or(method, "FP8")
			shows = append(shows, fmt.Sprintf("tensor %q is %s", n, t.DType))
		}
		if len(shows) >= 3 {
			break
		}
	}
	if len(shows) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s is quantized (%s: %s); xpuinject plans and packs unquantized F32, F16 or BF16 "+
		"weights: use the model's unquantized checkpoint (its repository without -FP8, -GPTQ or -AWQ in the name)",
		ErrQuantized, filepath.Clean(ck.Dir), cmp.Or(method, "unknown method"), strings.Join(shows, "; "))
}
