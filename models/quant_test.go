package models

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// Quantized checkpoints are refused up front, naming the method and what shows it, instead
// of failing later on a tensor no layer owns.
func TestQuantizedCheckpoints(t *testing.T) {
	rename := func(h map[string]any, from, to string) {
		h[to] = h[from]
		delete(h, from)
	}
	gptq := copyFixture(t, "llama-tiny")
	editHeader(t, filepath.Join(gptq, "model.safetensors"), func(h map[string]any) {
		rename(h, "model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.down_proj.qweight")
		rename(h, "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.g_idx")
	})
	bnb := copyFixture(t, "llama-tiny")
	editJSON(t, filepath.Join(bnb, ConfigFile), func(m map[string]any) {
		m["quantization_config"] = map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true}
	})
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{"../testdata/quantized/llama-tiny-fp8", []string{"llama-tiny-fp8 is quantized (FP8: ",
			`config.json quantization_config.quant_method "fp8"`, `tensor "model.layers.0.mlp.down_proj.weight" is F8_E4M3`,
			`tensor "model.layers.0.mlp.down_proj.weight_scale_inv"`, "use the model's unquantized checkpoint"}},
		{gptq, []string{"is quantized (GPTQ or AWQ: ", `tensor "model.layers.0.mlp.down_proj.qweight"`,
			`tensor "model.layers.0.mlp.up_proj.g_idx"`}},
		{bnb, []string{`is quantized (BITSANDBYTES: config.json quantization_config.quant_method "bitsandbytes")`}},
	} {
		_, err := Load(c.dir)
		if !errors.Is(err, ErrQuantized) {
			t.Errorf("%s: error %v, want ErrQuantized", c.dir, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.dir, err, w)
			}
		}
	}
	if _, err := Load(filepath.Join(fixtures, "llama-tiny")); err != nil {
		t.Fatalf("unquantized fixture refused: %v", err)
	}
}
