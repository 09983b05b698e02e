package inject

import (
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// attentionGraph is one Llama attention layer with the given shape (F32 tensors).
func attentionGraph(hidden, heads, kvHeads, headDim int64) *models.Graph {
	m := "model.layers.0.self_attn"
	ts := map[string]*models.Tensor{}
	add := func(role string, shape ...int64) string {
		n := m + "." + role
		ts[n] = &models.Tensor{Name: n, DType: models.F32, Shape: shape}
		return n
	}
	l := models.Layer{
		Module: m, Kind: models.KindAttention, Class: "LlamaAttention", Block: 0,
		Dims: map[string]int64{"hidden": hidden, "heads": heads, "kv_heads": kvHeads, "head_dim": headDim},
		Tensors: map[string]string{
			"q_proj.weight": add("q_proj.weight", heads*headDim, hidden),
			"k_proj.weight": add("k_proj.weight", kvHeads*headDim, hidden),
			"v_proj.weight": add("v_proj.weight", kvHeads*headDim, hidden),
			"o_proj.weight": add("o_proj.weight", hidden, heads*headDim),
		},
	}
	return &models.Graph{Arch: "llama", Checkpoint: &models.Checkpoint{Tensors: ts}, Layers: []models.Layer{l}}
}

// The measured routes (BENCHMARKS.md 2026-11-29) send exactly the slower sub-operations of
// Llama-3.2-1B's attention to the vendor path, keep the layer replaced, and say why.
func TestPlanVendorRoutes(t *testing.T) {
	cases := []struct {
		name              string
		hidden, h, kv, hd int64
		want              []string
	}{
		{"llama-3.2-1b", 2048, 32, 8, 64, []string{"attention-prefill", "o_proj", "qkv_proj"}},
		{"llama-3.1-8b", 4096, 32, 8, 128, []string{"attention-prefill"}},
		{"unmeasured head_dim 32", 1024, 32, 8, 32, nil},
	}
	for _, c := range cases {
		p, err := NewPlan(attentionGraph(c.hidden, c.h, c.kv, c.hd), kernels.Default(), PlanOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lp := p.Layers[0]
		if lp.Kernel != "attention-prefill" || lp.Layer != "Attention" {
			t.Fatalf("%s: layer not replaced: %s (%s)", c.name, lp.Kernel, lp.Reason)
		}
		got := sortedKeys(lp.Vendor)
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: vendor ops %v, want %v", c.name, got, c.want)
		}
		for _, op := range got {
			if !strings.Contains(lp.Vendor[op], "BENCHMARKS.md 2026-11-29") || !strings.Contains(lp.Reason, op+" on the vendor path faster") {
				t.Errorf("%s: %s: reason does not carry the measurement: %q / %q", c.name, op, lp.Vendor[op], lp.Reason)
			}
		}
	}
}
