package models

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestMoEConfigs: the MoE families' config fields decide which layers are sparse, and a
// bad value or a wrong expert tensor is an error naming it.
func TestMoEConfigs(t *testing.T) {
	load := func(t *testing.T, fixture string, edit func(m map[string]any)) (*Graph, error) {
		dir := copyFixture(t, fixture)
		if edit != nil {
			editJSON(t, filepath.Join(dir, ConfigFile), edit)
		}
		return Load(dir)
	}
	t.Run("qwen3_moe norm_topk_prob false", func(t *testing.T) {
		g, err := load(t, "qwen3-moe-tiny", func(m map[string]any) { m["norm_topk_prob"] = false })
		if err != nil {
			t.Fatal(err)
		}
		if r := layer(t, g, "model.layers.0.mlp").Router; r != RouterSoftmaxTopK {
			t.Errorf("router %q, want %q", r, RouterSoftmaxTopK)
		}
	})
	t.Run("qwen3_moe num_experts as the Hub writes it", func(t *testing.T) {
		g, err := load(t, "qwen3-moe-tiny", func(m map[string]any) {
			m["num_experts"] = m["num_local_experts"]
			delete(m, "num_local_experts")
		})
		if err != nil {
			t.Fatal(err)
		}
		if e := layer(t, g, "model.layers.0.mlp").Dims["experts"]; e != 6 {
			t.Errorf("experts %d", e)
		}
	})
	for _, c := range []struct {
		name, fixture string
		edit          func(m map[string]any)
		want          error
		mention       string
	}{
		// decoder_sparse_step 2 makes layer 0 dense: the checkpoint has experts there instead.
		{"decoder_sparse_step", "qwen3-moe-tiny", func(m map[string]any) {
			m["decoder_sparse_step"] = 2
			m["mlp_only_layers"] = []any{}
		}, nil, "model.layers.0.mlp.gate_proj.weight"},
		// Layer 1 sparse: the checkpoint has its dense MLP, not experts.
		{"mlp_only_layers empty", "qwen3-moe-tiny", func(m map[string]any) { m["mlp_only_layers"] = []any{} },
			nil, "model.layers.1.mlp.gate.weight"},
		{"mlp_only_layers out of range", "qwen3-moe-tiny", func(m map[string]any) { m["mlp_only_layers"] = []any{7} },
			ErrBadConfig, "mlp_only_layers holds 7"},
		{"decoder_sparse_step 0", "qwen3-moe-tiny", func(m map[string]any) { m["decoder_sparse_step"] = 0 },
			ErrBadConfig, "decoder_sparse_step is 0"},
		{"experts disagree", "qwen3-moe-tiny", func(m map[string]any) { m["num_experts"] = 8 },
			ErrBadConfig, "num_experts 8 and num_local_experts 6 disagree"},
		{"top-k over experts", "mixtral-tiny", func(m map[string]any) { m["num_experts_per_tok"] = 7 },
			ErrBadConfig, "num_experts_per_tok is 7"},
		{"more experts than stored", "mixtral-tiny", func(m map[string]any) { m["num_local_experts"] = 7 },
			nil, "block_sparse_moe.gate.weight"},
		{"expert width", "mixtral-tiny", func(m map[string]any) { m["intermediate_size"] = 32 },
			nil, "intermediate_size=32"},
		{"activation", "mixtral-tiny", func(m map[string]any) { m["hidden_act"] = "gelu" },
			ErrBadConfig, `hidden_act is "gelu"`},
		// GraniteMoE: its stacked tensors checked against the config before any view is made
		{"stacked experts", "granitemoe-tiny", func(m map[string]any) { m["num_local_experts"] = 6 },
			nil, "input_linear.weight"},
		{"stacked expert width", "granitemoe-tiny", func(m map[string]any) { m["intermediate_size"] = 48 },
			nil, "intermediate_size=48"},
		{"granitemoe activation", "granitemoe-tiny", func(m map[string]any) { m["hidden_act"] = "gelu" },
			ErrBadConfig, `the GraniteMoE experts here compute silu`},
		{"granitemoe top-k", "granitemoe-tiny", func(m map[string]any) { m["num_experts_per_tok"] = 6 },
			ErrBadConfig, "num_experts_per_tok is 6, want 1 to num_local_experts (5)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.fixture, c.edit)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("err = %v, want %v mentioning %q", err, c.want, c.mention)
			}
		})
	}
}
