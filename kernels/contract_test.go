package kernels

import (
	"strings"
	"testing"
)

// The roles the planner asks PackedAttr for exist, and attribute names are unique per layer.
func TestContractPackedAttrs(t *testing.T) {
	for layer, roles := range map[string][]string{
		"Attention": {"qkv_weight", "qkv_bias", "o_weight", "o_bias"},
		"SwiGLUMLP": {"gate_up_weight", "down_weight"},
		"LinearBN":  {"weight", "bias"}, "BNLinear": {"weight", "bias"}, "ConvBN": {"weight", "bias"},
	} {
		seen := map[string]bool{}
		for _, role := range roles {
			a := PackedAttr(layer, role)
			if seen[a] || !strings.HasPrefix(a, "xpuinject_") {
				t.Errorf("%s %s: attribute %q (duplicate or without the xpuinject_ prefix)", layer, role, a)
			}
			seen[a] = true
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("PackedAttr of an unknown role did not panic")
		}
	}()
	PackedAttr("Attention", "nope")
}

func TestParseContractRejects(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{`, "unexpected EOF"},
		{`{"decode_max_tokens": 0}`, "decode_max_tokens 0"},
		{`{"decode_max_tokens": 64, "short_max_tokens": 64}`, "short_max_tokens 64 is not above decode_max_tokens 64"},
		{`{"decode_max_tokens": 64, "short_max_tokens": 128, "min_gemm_dim": 16, "attention_head_dims": [], "gemm_epilogues": ["none"]}`, "must not be empty"},
		{`{"decode_max_tokens": 64, "short_max_tokens": 128, "min_gemm_dim": 16, "attention_head_dims": [64], "gemm_epilogues": ["none"], "module_attrs": {"name": "n"}}`, "module_attrs"},
		{`{"decode_max_tokens": 64, "short_max_tokens": 128, "min_gemm_dim": 16, "attention_head_dims": [64], "gemm_epilogues": ["none"], "module_attrs": {"name": "n", "vendor": "v"}, "layers": {"A": {"packed": {"w": ""}}}, "default_gpu": "h200"}`, `layer A: packed role "w"`},
		{`{"decode_max_tokens": 64, "short_max_tokens": 128, "min_gemm_dim": 16, "attention_head_dims": [64], "gemm_epilogues": ["none"], "module_attrs": {"name": "n", "vendor": "v"}, "layers": {"A": {}}, "default_gpu": "H200"}`, `default_gpu "H200"`},
		{`{"decode_max_tokens": 64, "short_max_tokens": 128, "min_gemm_dim": 16, "attention_head_dims": [64], "gemm_epilogues": ["none"], "module_attrs": {"name": "n", "vendor": "v"}, "layers": {"A": {}}, "default_gpu": "h200"}`, `no packed_checks`},
	} {
		if _, err := ParseContract([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.doc, err, c.want)
		}
	}
	c := TheContract()
	if c.DecodeMaxTokens != 16 || c.ModuleAttrs["vendor"] != "xpuinject_vendor" || len(LayerNames()) < 8 || c.DefaultGPU != "h200" {
		t.Errorf("embedded contract: %+v", c)
	}
	if !LayerReplaces("DecoderLayer", "Qwen3DecoderLayer") || LayerReplaces("RMSNorm", "LlamaMLP") {
		t.Error("LayerReplaces disagrees with contract.json's classes")
	}
}
