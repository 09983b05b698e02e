package models

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from the fixtures")

// golden is what a fixture's golden file records: everything but absolute paths.
type golden struct {
	Arch    string
	Files   []string
	Tensors int
	Layers  []Layer
}

func goldenOf(g *Graph) golden {
	out := golden{Arch: g.Arch, Layers: g.Layers}
	for _, t := range g.Checkpoint.Tensors {
		if t.Of == "" { // the files' tensors, not views of them
			out.Tensors++
		}
	}
	for _, f := range g.Checkpoint.Files {
		out.Files = append(out.Files, filepath.Base(f))
	}
	return out
}

// TestFixturesGolden loads every fixture folder and compares the layers with
// testdata/golden/<fixture>.json (go test ./models -run TestFixturesGolden -update).
func TestFixturesGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(fixtures, "*", ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d fixtures in %s, want at least 10 (llama-tiny, llama-sharded, llama-odd, mistral-tiny, qwen2-tiny, "+
			"qwen3-tiny, levit-tiny, gemma2-tiny, gemma3-tiny, phi3-tiny)", len(dirs), fixtures)
	}
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			g, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(goldenOf(g), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("layers differ from %s (run with -update if the change is intended):\n%s", path, firstDiff(string(got), string(want)))
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return "line " + itoa(i+1) + ":\n got: " + al[i] + "\nwant: " + bl[i]
		}
	}
	return "lengths differ: " + itoa(len(al)) + " vs " + itoa(len(bl)) + " lines"
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestFixtureFacts asserts, independently of the golden files, the facts each fixture
// was made to exercise (config in testdata/fixtures/*/config.json).
func TestFixtureFacts(t *testing.T) {
	type facts struct {
		layers  int
		kinds   map[LayerKind]int
		files   int
		check   func(t *testing.T, g *Graph)
		classes []string
	}
	llamaKinds := map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMLPSwiGLU: 2, KindLMHead: 1}
	attn := func(g *Graph, i int) Layer { return layer(t, g, "model.layers."+itoa(i)+".self_attn") }
	cases := map[string]facts{
		"llama-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			a := attn(g, 1)
			wantDims(t, a, map[string]int64{"hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16})
			wantTensors(t, a, map[string]string{
				"q_proj.weight": "model.layers.1.self_attn.q_proj.weight", "k_proj.weight": "model.layers.1.self_attn.k_proj.weight",
				"v_proj.weight": "model.layers.1.self_attn.v_proj.weight", "o_proj.weight": "model.layers.1.self_attn.o_proj.weight"})
			if a.Bias || a.Block != 1 {
				t.Errorf("attention Bias %v Block %d", a.Bias, a.Block)
			}
			h := layer(t, g, "lm_head")
			if h.Tied || h.Tensors["weight"] != "lm_head.weight" {
				t.Errorf("lm_head %+v", h)
			}
			n := layer(t, g, "model.layers.0.input_layernorm")
			if n.Eps != 1e-6 || n.Dims["hidden"] != 64 || n.Block != 0 {
				t.Errorf("input_layernorm %+v", n)
			}
			m := layer(t, g, "model.layers.0.mlp")
			wantDims(t, m, map[string]int64{"hidden": 64, "intermediate": 160})
		}, []string{"Embedding", "LlamaRMSNorm", "LlamaAttention", "LlamaMLP", "Linear"}},
		"llama-sharded": {11, llamaKinds, 4, nil, nil},
		"llama-odd": {7, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 3, KindAttention: 1, KindMLPSwiGLU: 1, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				wantDims(t, attn(g, 0), map[string]int64{"hidden": 160, "heads": 5, "kv_heads": 5, "head_dim": 32})
				h := layer(t, g, "lm_head")
				if !h.Tied || h.Tensors["weight"] != "model.embed_tokens.weight" {
					t.Errorf("tied lm_head %+v", h)
				}
				if dt := g.Checkpoint.Tensors["model.norm.weight"].DType; dt != F16 {
					t.Errorf("dtype %s, want F16", dt)
				}
			}, nil},
		"mistral-tiny": {11, llamaKinds, 1, nil, []string{"MistralRMSNorm", "MistralAttention", "MistralMLP"}},
		"qwen2-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			a := attn(g, 0)
			if !a.Bias || a.Tensors["q_proj.bias"] == "" || a.Tensors["k_proj.bias"] == "" || a.Tensors["v_proj.bias"] == "" {
				t.Errorf("qwen2 q/k/v biases missing: %v", a.Tensors)
			}
			if _, ok := a.Tensors["o_proj.bias"]; ok {
				t.Errorf("qwen2 o_proj has no bias")
			}
		}, []string{"Qwen2RMSNorm", "Qwen2Attention", "Qwen2MLP"}},
		"qwen3-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			a := attn(g, 0)
			wantDims(t, a, map[string]int64{"hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 32})
			if a.Tensors["q_norm.weight"] != "model.layers.0.self_attn.q_norm.weight" || a.Tensors["k_norm.weight"] == "" || a.Eps != 1e-6 {
				t.Errorf("qwen3 q/k norms: %v eps %g", a.Tensors, a.Eps)
			}
			if got := g.Checkpoint.Tensors[a.Tensors["q_proj.weight"]].Shape; !reflect.DeepEqual(got, []int64{128, 64}) {
				t.Errorf("q_proj shape %v", got)
			}
		}, []string{"Qwen3RMSNorm", "Qwen3Attention", "Qwen3MLP"}},
		"qwen3-moe-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMoE: 1, KindMLPSwiGLU: 1, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				m := layer(t, g, "model.layers.0.mlp")
				wantDims(t, m, map[string]int64{"hidden": 64, "intermediate": 24, "experts": 6, "top_k": 2})
				if m.Router != RouterSoftmaxTopKNorm || m.BlockClass != "Qwen3MoeDecoderLayer" || len(m.Tensors) != 1+6*3 {
					t.Errorf("moe block %+v", m)
				}
				wantTensors(t, m, map[string]string{"gate.weight": "model.layers.0.mlp.gate.weight",
					"experts.5.up_proj.weight": "model.layers.0.mlp.experts.5.up_proj.weight"})
				// mlp_only_layers: [1] keeps a dense MLP of intermediate_size there.
				wantDims(t, layer(t, g, "model.layers.1.mlp"), map[string]int64{"hidden": 64, "intermediate": 48})
				wantDims(t, attn(g, 1), map[string]int64{"hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 32})
			}, []string{"Qwen3MoeRMSNorm", "Qwen3MoeAttention", "Qwen3MoeSparseMoeBlock", "Qwen3MoeMLP"}},
		"qwen2-moe-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMoE: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				m := layer(t, g, "model.layers.1.mlp")
				wantDims(t, m, map[string]int64{"hidden": 64, "intermediate": 24, "experts": 5, "top_k": 3, "shared_intermediate": 40})
				if m.Router != RouterSoftmaxTopK || m.Class != "Qwen2MoeSparseMoeBlock" || m.BlockClass != "Qwen2MoeDecoderLayer" ||
					len(m.Tensors) != 1+5*3+4 {
					t.Errorf("moe block %+v", m)
				}
				wantTensors(t, m, map[string]string{"shared_expert.down_proj.weight": "model.layers.1.mlp.shared_expert.down_proj.weight",
					"shared_expert_gate.weight": "model.layers.1.mlp.shared_expert_gate.weight"})
				a := attn(g, 0)
				wantDims(t, a, map[string]int64{"hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 32})
				if !a.Bias || a.Tensors["q_proj.bias"] == "" || a.Tensors["o_proj.bias"] != "" {
					t.Errorf("attention biases %+v", a)
				}
			}, []string{"Qwen2MoeRMSNorm", "Qwen2MoeAttention", "Qwen2MoeSparseMoeBlock"}},
		"mixtral-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMoE: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				m := layer(t, g, "model.layers.1.mlp")
				wantDims(t, m, map[string]int64{"hidden": 64, "intermediate": 24, "experts": 6, "top_k": 3})
				if m.Router != RouterSoftmaxTopKNormFP32 || m.Class != "MixtralSparseMoeBlock" {
					t.Errorf("moe block %+v", m)
				}
				// The module is the loaded name (mlp), the tensors the checkpoint's.
				wantTensors(t, m, map[string]string{"gate.weight": "model.layers.1.block_sparse_moe.gate.weight",
					"experts.2.gate_proj.weight": "model.layers.1.block_sparse_moe.experts.2.w1.weight",
					"experts.2.up_proj.weight":   "model.layers.1.block_sparse_moe.experts.2.w3.weight",
					"experts.2.down_proj.weight": "model.layers.1.block_sparse_moe.experts.2.w2.weight"})
			}, []string{"MixtralRMSNorm", "MixtralAttention", "MixtralSparseMoeBlock"}},
		"gemma2-tiny": {15, map[LayerKind]int{KindEmbedding: 1, KindRMSNormGemma: 9, KindAttention: 2, KindMLPGeGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				for i, window := range []int64{16, 0} { // layer_types default: sliding, full
					a := attn(g, i)
					wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 80})
					if a.Dims["sliding_window"] != window || a.Softcap != 50 {
						t.Errorf("layer %d: sliding_window %d softcap %g, want %d and 50", i, a.Dims["sliding_window"], a.Softcap, window)
					}
				}
				h := layer(t, g, "lm_head")
				if !h.Tied || h.Softcap != 30 || h.Tensors["weight"] != "model.embed_tokens.weight" {
					t.Errorf("lm_head %+v", h)
				}
				n := layer(t, g, "model.layers.1.pre_feedforward_layernorm")
				if n.BlockClass != "Gemma2DecoderLayer" || n.Eps != 1e-6 {
					t.Errorf("pre_feedforward_layernorm %+v", n)
				}
			}, []string{"Gemma2TextScaledWordEmbedding", "Gemma2RMSNorm", "Gemma2Attention", "Gemma2MLP"}},
		"gemma3-tiny": {15, map[LayerKind]int{KindEmbedding: 1, KindRMSNormGemma: 9, KindAttention: 2, KindMLPGeGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				a := attn(g, 1)
				wantDims(t, a, map[string]int64{"heads": 3, "kv_heads": 1, "head_dim": 96})
				if a.Dims["sliding_window"] != 0 || attn(g, 0).Dims["sliding_window"] != 16 || a.Softcap != 0 {
					t.Errorf("layer_types: %v / %v", attn(g, 0).Dims, a.Dims)
				}
				if a.Children["q_norm"] != "Gemma3RMSNorm" || a.Tensors["k_norm.weight"] != "model.layers.1.self_attn.k_norm.weight" {
					t.Errorf("q/k norms %+v", a)
				}
			}, []string{"Gemma3RMSNorm", "Gemma3Attention", "Gemma3MLP"}},
		"phi3-tiny": {7, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 3, KindAttention: 1, KindMLPSwiGLU: 1, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				a := attn(g, 0)
				wantDims(t, a, map[string]int64{"hidden": 240, "heads": 3, "kv_heads": 1, "head_dim": 80})
				if _, ok := a.Dims["rotary_dim"]; ok || a.Rope != "" || a.Tensors["qkv_proj.weight"] == "" {
					t.Errorf("phi3 attention %+v", a)
				}
				m := layer(t, g, "model.layers.0.mlp")
				if m.Tensors["gate_up_proj.weight"] != "model.layers.0.mlp.gate_up_proj.weight" || m.Dims["intermediate"] != 192 {
					t.Errorf("phi3 mlp %+v", m)
				}
			}, []string{"Phi3RMSNorm", "Phi3Attention", "Phi3MLP"}},
		"smollm3-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			// no_rope_layers [1, 0] with use_sliding_window: layer 1 is NoPE and, by layer_types'
			// default, the sliding one
			for i, want := range []struct {
				rope   string
				window int64
			}{{"", 0}, {RopeNone, 16}} {
				a := attn(g, i)
				wantDims(t, a, map[string]int64{"hidden": 64, "heads": 3, "kv_heads": 1, "head_dim": 32})
				if a.Rope != want.rope || a.Dims["sliding_window"] != want.window || a.Class != "SmolLM3Attention" {
					t.Errorf("layer %d: rope %q window %d class %s, want %q %d", i, a.Rope, a.Dims["sliding_window"], a.Class,
						want.rope, want.window)
				}
			}
			if h := layer(t, g, "lm_head"); !h.Tied {
				t.Errorf("lm_head %+v", h)
			}
		}, []string{"SmolLM3RMSNorm", "SmolLM3Attention", "SmolLM3MLP"}},
		"granite-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			wantDims(t, attn(g, 1), map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 32})
			for _, m := range []string{"model.layers.0.post_attention_layernorm", "model.layers.1.post_attention_layernorm"} {
				if n := layer(t, g, m); n.ResidualScale != 0.22 || n.BlockClass != "GraniteDecoderLayer" {
					t.Errorf("%s: residual scale %g block %q, want 0.22 GraniteDecoderLayer", m, n.ResidualScale, n.BlockClass)
				}
			}
			for _, m := range []string{"model.layers.1.input_layernorm", "model.norm"} {
				if n := layer(t, g, m); n.ResidualScale != 0 {
					t.Errorf("%s: residual scale %g, want none", m, n.ResidualScale)
				}
			}
		}, []string{"GraniteRMSNorm", "GraniteAttention", "GraniteMLP"}},
		"gemma-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNormGemma: 5, KindAttention: 2, KindMLPGeGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// Llama's block under Gemma's kinds: hidden_act "gelu" is the exact gelu
				wantDims(t, attn(g, 1), map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 80})
				m := layer(t, g, "model.layers.1.mlp")
				wantDims(t, m, map[string]int64{"hidden": 96, "intermediate": 104})
				if m.Activation != ActGeLUExact || m.BlockClass != "GemmaDecoderLayer" {
					t.Errorf("mlp %+v", m)
				}
				n := layer(t, g, "model.layers.0.post_attention_layernorm")
				if n.Kind != KindRMSNormGemma || n.BlockClass != "GemmaDecoderLayer" || n.Eps != 1e-6 {
					t.Errorf("post_attention_layernorm %+v", n)
				}
				if e := layer(t, g, "model.embed_tokens"); e.Class != "GemmaTextScaledWordEmbedding" {
					t.Errorf("embedding %+v", e)
				}
				if h := layer(t, g, "lm_head"); !h.Tied || h.Softcap != 0 {
					t.Errorf("lm_head %+v", h)
				}
			}, []string{"GemmaTextScaledWordEmbedding", "GemmaRMSNorm", "GemmaAttention", "GemmaMLP"}},
		"glm-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			// Llama's block; head_dim 64 of its own, 32 channels rotating in adjacent pairs; the
			// checkpoint's fused gate_up_proj; q/k/v biased, o_proj not
			a := attn(g, 1)
			wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 64, "rotary_dim": 32})
			if !a.InterleavedRotary || !a.Bias || a.Tensors["q_proj.bias"] == "" || a.Tensors["o_proj.bias"] != "" {
				t.Errorf("attention %+v", a)
			}
			if m := layer(t, g, "model.layers.1.mlp"); m.Tensors["gate_up_proj.weight"] != "model.layers.1.mlp.gate_up_proj.weight" {
				t.Errorf("mlp %+v", m)
			}
		}, []string{"GlmRMSNorm", "GlmAttention", "GlmMLP"}},
		"glm4-tiny": {15, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 9, KindAttention: 2, KindMLPSwiGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// a norm after each branch, in the block's execution order
				order := []string{"model.layers.0.input_layernorm", "model.layers.0.self_attn", "model.layers.0.post_self_attn_layernorm",
					"model.layers.0.post_attention_layernorm", "model.layers.0.mlp", "model.layers.0.post_mlp_layernorm"}
				for i, m := range order {
					if g.Layers[1+i].Module != m {
						t.Errorf("layer %d is %s, want %s", 1+i, g.Layers[1+i].Module, m)
					}
				}
				// head_dim 80 of its own (not 96 / 3); 40 channels rotate, in adjacent pairs
				a := attn(g, 1)
				wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 80, "rotary_dim": 40})
				if !a.InterleavedRotary || !a.Bias || a.Rope != "" || a.Tensors["q_proj.bias"] != "model.layers.1.self_attn.q_proj.bias" ||
					a.Tensors["o_proj.bias"] != "" {
					t.Errorf("attention %+v", a)
				}
				m := layer(t, g, "model.layers.1.mlp")
				if m.Tensors["gate_up_proj.weight"] != "model.layers.1.mlp.gate_up_proj.weight" || m.Class != "Glm4MLP" {
					t.Errorf("mlp %+v", m)
				}
				if n := layer(t, g, "model.layers.1.post_mlp_layernorm"); n.BlockClass != "Glm4DecoderLayer" || n.Eps != 1e-6 {
					t.Errorf("post_mlp_layernorm %+v", n)
				}
				if h := layer(t, g, "lm_head"); h.Tied {
					t.Errorf("lm_head %+v", h)
				}
			}, []string{"Glm4RMSNorm", "Glm4Attention", "Glm4MLP"}},
		"ernie4_5-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			// every channel rotates, in adjacent pairs; head_dim 32 of its own (not 96 / 3)
			a := attn(g, 1)
			wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 32})
			if _, ok := a.Dims["rotary_dim"]; ok || !a.InterleavedRotary || a.Bias || a.Class != "Ernie4_5Attention" {
				t.Errorf("attention %+v", a)
			}
			if h := layer(t, g, "lm_head"); !h.Tied {
				t.Errorf("lm_head %+v", h)
			}
		}, []string{"Ernie4_5RMSNorm", "Ernie4_5Attention", "Ernie4_5MLP"}},
		"seed_oss-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			// q/k/v biases by attention_bias, o_proj's by attention_out_bias; head_dim 32 of its own
			a := attn(g, 1)
			wantDims(t, a, map[string]int64{"hidden": 64, "heads": 5, "kv_heads": 1, "head_dim": 32})
			if !a.Bias || a.Tensors["o_proj.bias"] != "model.layers.1.self_attn.o_proj.bias" ||
				a.Tensors["v_proj.bias"] != "model.layers.1.self_attn.v_proj.bias" || a.InterleavedRotary {
				t.Errorf("attention %+v", a)
			}
		}, []string{"SeedOssRMSNorm", "SeedOssAttention", "SeedOssMLP"}},
		"flex_olmo-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNormFP32: 5, KindAttention: 2, KindMoE: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// OLMo 2's block around OLMoE's experts: no input norm, a norm after each branch
				order := []string{"model.layers.0.self_attn", "model.layers.0.post_attention_layernorm", "model.layers.0.mlp",
					"model.layers.0.post_feedforward_layernorm"}
				for i, m := range order {
					if g.Layers[1+i].Module != m {
						t.Errorf("layer %d is %s, want %s", 1+i, g.Layers[1+i].Module, m)
					}
				}
				m := layer(t, g, "model.layers.1.mlp")
				wantDims(t, m, map[string]int64{"hidden": 96, "intermediate": 40, "experts": 5, "top_k": 3})
				if m.Router != RouterSoftmaxTopK || m.Class != "FlexOlmoSparseMoeBlock" || m.BlockClass != "FlexOlmoDecoderLayer" {
					t.Errorf("moe block %+v", m)
				}
				if a := attn(g, 0); a.Children["q_norm"] != "FlexOlmoRMSNorm" || a.Tensors["k_norm.weight"] == "" {
					t.Errorf("attention %+v", a)
				}
			}, []string{"FlexOlmoRMSNorm", "FlexOlmoAttention", "FlexOlmoSparseMoeBlock"}},
		"granitemoe-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMoE: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// the experts stacked in the checkpoint: each projection a view of its bytes
				m := layer(t, g, "model.layers.1.block_sparse_moe")
				wantDims(t, m, map[string]int64{"hidden": 96, "intermediate": 40, "experts": 5, "top_k": 3})
				if m.Router != RouterSoftmaxTopKNorm || m.Class != "GraniteMoeMoE" || m.BlockClass != "GraniteMoeDecoderLayer" ||
					m.Tensors["gate.weight"] != "model.layers.1.block_sparse_moe.router.layer.weight" {
					t.Errorf("moe block %+v", m)
				}
				in := g.Checkpoint.Tensors["model.layers.1.block_sparse_moe.input_linear.weight"]
				out := g.Checkpoint.Tensors["model.layers.1.block_sparse_moe.output_linear.weight"]
				const row = 96 * 2 // one hidden-wide bf16 row
				for _, c := range []struct {
					role string
					of   *Tensor
					at   int64
				}{
					{"experts.0.gate_proj.weight", in, 0}, {"experts.0.up_proj.weight", in, 40 * row},
					{"experts.3.gate_proj.weight", in, 3 * 80 * row}, {"experts.3.up_proj.weight", in, (3*80 + 40) * row},
					{"experts.4.down_proj.weight", out, 4 * 96 * 40 * 2},
				} {
					v := g.Checkpoint.Tensors[m.Tensors[c.role]]
					if v == nil || v.Of != c.of.Name || v.File != c.of.File || v.Offset != c.of.Offset+c.at || v.Size != 40*row {
						t.Errorf("%s: view %+v, want %d bytes at %d of %s", c.role, v, 40*row, c.of.Offset+c.at, c.of.Name)
					}
				}
				// Granite's residual_multiplier on the post-attention norms
				if n := layer(t, g, "model.layers.0.post_attention_layernorm"); n.ResidualScale != 0.22 {
					t.Errorf("post-attention norm %+v", n)
				}
			}, []string{"GraniteMoeRMSNorm", "GraniteMoeAttention", "GraniteMoeMoE"}},
		"olmoe-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMoE: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// every layer sparse: experts of intermediate_size, the router without renormalization
				m := layer(t, g, "model.layers.1.mlp")
				wantDims(t, m, map[string]int64{"hidden": 64, "intermediate": 24, "experts": 5, "top_k": 2})
				if m.Router != RouterSoftmaxTopK || m.Class != "OlmoeSparseMoeBlock" || m.BlockClass != "OlmoeDecoderLayer" {
					t.Errorf("moe block %+v", m)
				}
				// q/k norms over the whole projection, in Llama's order (the rmsnorm kind's class)
				a := attn(g, 0)
				wantDims(t, a, map[string]int64{"hidden": 64, "heads": 2, "kv_heads": 1, "head_dim": 32})
				if a.Children["q_norm"] != "OlmoeRMSNorm" || a.Eps != 1e-6 || a.Bias {
					t.Errorf("attention %+v", a)
				}
			}, []string{"OlmoeRMSNorm", "OlmoeAttention", "OlmoeSparseMoeBlock"}},
		"olmo2-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNormFP32: 5, KindAttention: 2, KindMLPSwiGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// no input norm; a norm after each branch; q/k norms over the whole projection
				for _, l := range g.Layers {
					if strings.HasSuffix(l.Module, "input_layernorm") {
						t.Errorf("OLMo 2 has no input norm: %s", l.Module)
					}
				}
				order := []string{"model.layers.0.self_attn", "model.layers.0.post_attention_layernorm", "model.layers.0.mlp",
					"model.layers.0.post_feedforward_layernorm", "model.layers.1.self_attn"}
				for i, m := range order {
					if g.Layers[1+i].Module != m {
						t.Errorf("layer %d is %s, want %s", 1+i, g.Layers[1+i].Module, m)
					}
				}
				a := attn(g, 1)
				wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 3, "head_dim": 32})
				if a.Children["k_norm"] != "Olmo2RMSNorm" || a.Tensors["q_norm.weight"] != "model.layers.1.self_attn.q_norm.weight" ||
					a.Eps != 1e-6 {
					t.Errorf("q/k norms %+v", a)
				}
				n := layer(t, g, "model.layers.1.post_feedforward_layernorm")
				if n.Kind != KindRMSNormFP32 || n.BlockClass != "Olmo2DecoderLayer" || n.Block != 1 {
					t.Errorf("post_feedforward_layernorm %+v", n)
				}
				if h := layer(t, g, "lm_head"); h.Tied {
					t.Errorf("lm_head %+v", h)
				}
			}, []string{"Olmo2RMSNorm", "Olmo2Attention", "Olmo2MLP"}},
		"olmo3-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNormFP32: 5, KindAttention: 2, KindMLPSwiGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// OLMo 2's block; layer_types slides layer 0 over 16 keys
				wantDims(t, attn(g, 0), map[string]int64{"hidden": 64, "heads": 2, "kv_heads": 2, "head_dim": 32, "sliding_window": 16})
				if a := attn(g, 1); a.Dims["sliding_window"] != 0 || a.Children["q_norm"] != "Olmo3RMSNorm" {
					t.Errorf("layer 1 attention %+v", a)
				}
				if n := layer(t, g, "model.layers.0.post_feedforward_layernorm"); n.Kind != KindRMSNormFP32 {
					t.Errorf("post_feedforward_layernorm %+v", n)
				}
			}, []string{"Olmo3RMSNorm", "Olmo3Attention", "Olmo3MLP"}},
		"exaone4-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNorm: 5, KindAttention: 2, KindMLPSwiGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// norms after each branch (Llama's rounding), per-head q/k norms; layer 0 slides
				// over 16 keys with RoPE, layer 1 (sliding_window_pattern 2) is global NoPE
				a := attn(g, 0)
				wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 32, "sliding_window": 16})
				if a.Rope != "" || a.Children["q_norm"] != "Exaone4RMSNorm" {
					t.Errorf("layer 0 attention %+v", a)
				}
				if a := attn(g, 1); a.Dims["sliding_window"] != 0 || a.Rope != RopeNone {
					t.Errorf("layer 1 attention %+v", a)
				}
				if n := layer(t, g, "model.layers.1.post_feedforward_layernorm"); n.Kind != KindRMSNorm || n.BlockClass != "Exaone4DecoderLayer" {
					t.Errorf("post_feedforward_layernorm %+v", n)
				}
				if h := layer(t, g, "lm_head"); !h.Tied {
					t.Errorf("lm_head %+v", h)
				}
				for _, l := range g.Layers {
					if strings.HasSuffix(l.Module, "input_layernorm") {
						t.Errorf("an input norm: %+v", l)
					}
				}
			}, []string{"Exaone4RMSNorm", "Exaone4Attention", "Exaone4MLP"}},
		"ministral-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			// Mistral's modules; layer_types slides layer 1 over 16 keys and not layer 0
			wantDims(t, attn(g, 1), map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 64, "sliding_window": 16})
			if a := attn(g, 0); a.Dims["sliding_window"] != 0 || a.Bias || a.Rope != "" {
				t.Errorf("layer 0 attention %+v", a)
			}
			if h := layer(t, g, "lm_head"); !h.Tied {
				t.Errorf("lm_head %+v", h)
			}
		}, []string{"MinistralRMSNorm", "MinistralAttention", "MinistralMLP"}},
		"hunyuan-tiny": {11, llamaKinds, 1, func(t *testing.T, g *Graph) {
			// Llama's modules; the per-head q/k norms are query_layernorm/key_layernorm, after RoPE
			a := attn(g, 1)
			wantDims(t, a, map[string]int64{"hidden": 64, "heads": 6, "kv_heads": 2, "head_dim": 32})
			if !a.Bias || !a.QKNormAfterRope || a.Tensors["q_norm.weight"] != "model.layers.1.self_attn.query_layernorm.weight" ||
				a.Tensors["o_proj.bias"] == "" || a.Children["key_layernorm"] != "HunYuanDenseV1RMSNorm" {
				t.Errorf("attention %+v", a)
			}
		}, []string{"HunYuanDenseV1RMSNorm", "HunYuanDenseV1Attention", "HunYuanDenseV1MLP"}},
		"helium-tiny": {11, map[LayerKind]int{KindEmbedding: 1, KindRMSNormFP32: 5, KindAttention: 2, KindMLPSwiGLU: 2, KindLMHead: 1}, 1,
			func(t *testing.T, g *Graph) {
				// every norm rounds once after its weight; adjacent rotary pairs; q/k/v biased, o_proj not
				a := attn(g, 0)
				wantDims(t, a, map[string]int64{"hidden": 96, "heads": 3, "kv_heads": 1, "head_dim": 32})
				if !a.InterleavedRotary || !a.Bias || a.Tensors["q_proj.bias"] == "" || a.Tensors["o_proj.bias"] != "" {
					t.Errorf("attention %+v", a)
				}
			}, []string{"HeliumRMSNorm", "HeliumAttention", "HeliumMLP"}},
		"levit-tiny": {33, map[LayerKind]int{KindConvBN: 4, KindAttention: 5, KindLinearBN: 22, KindBNLinear: 2}, 1,
			func(t *testing.T, g *Graph) {
				c := layer(t, g, "levit.patch_embeddings.embedding_layer_2")
				wantDims(t, c, map[string]int64{"in": 4, "out": 8, "kernel": 3, "stride": 2, "padding": 1})
				if c.Tensors["conv.weight"] != "levit.patch_embeddings.embedding_layer_2.convolution.weight" ||
					c.Tensors["bn.running_var"] != "levit.patch_embeddings.embedding_layer_2.batch_norm.running_var" ||
					c.Tensors["bn.num_batches_tracked"] == "" || c.Eps != 1e-5 {
					t.Errorf("conv-bn %+v", c)
				}
				q := layer(t, g, "levit.encoder.stages.0.layers.0.module.queries_keys_values")
				wantDims(t, q, map[string]int64{"in": 32, "out": 128, "stage": 0})
				s := layer(t, g, "levit.encoder.stages.0.layers.2")
				if s.Class != "LevitAttentionSubsample" || s.Tensors["attention_biases"] != "levit.encoder.stages.0.layers.2.attention_biases" {
					t.Errorf("subsample %+v", s)
				}
				wantDims(t, s, map[string]int64{"hidden": 32, "out": 48, "heads": 2, "key_dim": 16, "resolution": 4, "resolution_out": 2, "stride": 2})
				kv := layer(t, g, "levit.encoder.stages.1.layers.2.keys_values")
				wantDims(t, kv, map[string]int64{"in": 48, "out": 240})
				for _, m := range []string{"classifier", "classifier_distill"} {
					h := layer(t, g, m)
					wantDims(t, h, map[string]int64{"in": 64, "out": 10})
					if h.Tensors["linear.bias"] != m+".linear.bias" || h.Tensors["bn.running_mean"] != m+".batch_norm.running_mean" {
						t.Errorf("%s %+v", m, h)
					}
				}
				if b := layer(t, g, "levit.encoder.stages.2.layers.1.module.linear_down").Block; b != 9 {
					t.Errorf("last block %d, want 9", b)
				}
			}, []string{"LevitConvEmbeddings", "LevitAttention", "LevitAttentionSubsample", "MLPLayerWithBN", "LevitClassificationLayer"}},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := Load(filepath.Join(fixtures, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Layers) != want.layers || len(g.Checkpoint.Files) != want.files {
				t.Errorf("%d layers in %d files, want %d in %d", len(g.Layers), len(g.Checkpoint.Files), want.layers, want.files)
			}
			kinds := map[LayerKind]int{}
			classes := map[string]bool{}
			owned := map[string]bool{}
			for _, l := range g.Layers {
				kinds[l.Kind]++
				classes[l.Class] = true
				for _, n := range l.Tensors {
					if g.Checkpoint.Tensors[n] == nil {
						t.Errorf("layer %s names tensor %q the checkpoint lacks", l.Module, n)
					} else if of := g.Checkpoint.Tensors[n].Of; of != "" {
						owned[of] = true // a view owns its stacked parent
					}
					owned[n] = true
				}
			}
			if !reflect.DeepEqual(kinds, want.kinds) {
				t.Errorf("kinds %v, want %v", kinds, want.kinds)
			}
			for _, c := range want.classes {
				if !classes[c] {
					t.Errorf("no layer of class %s (have %v)", c, keys(classes))
				}
			}
			for n := range g.Checkpoint.Tensors {
				if !owned[n] && n != "lm_head.weight" {
					t.Errorf("tensor %q belongs to no layer", n)
				}
			}
			if want.check != nil {
				want.check(t, g)
			}
		})
	}
}

func layer(t *testing.T, g *Graph, module string) Layer {
	t.Helper()
	for _, l := range g.Layers {
		if l.Module == module {
			return l
		}
	}
	t.Fatalf("no layer %s", module)
	return Layer{}
}

func wantDims(t *testing.T, l Layer, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if l.Dims[k] != v {
			t.Errorf("%s: Dims[%s] = %d, want %d (all: %v)", l.Module, k, l.Dims[k], v, l.Dims)
		}
	}
}

func wantTensors(t *testing.T, l Layer, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if l.Tensors[k] != v {
			t.Errorf("%s: Tensors[%s] = %q, want %q", l.Module, k, l.Tensors[k], v)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Phi-3's RoPE in both spellings: Hub configs carry rope_scaling (+ top-level
// partial_rotary_factor), configs saved by transformers 5.17 rope_parameters; Gemma 3's
// per-layer-type rope_parameters and the Hub's rope_theta / rope_local_base_freq both load.
func TestRopeSpellings(t *testing.T) {
	for _, c := range []struct {
		name    string
		fixture string
		edit    func(m map[string]any)
		rotary  int64
		rope    string
	}{
		{"phi3 default", "phi3-tiny", func(m map[string]any) {}, 0, ""},
		{"phi3 hub longrope", "phi3-tiny", func(m map[string]any) {
			delete(m, "rope_parameters")
			m["partial_rotary_factor"] = 0.75
			m["rope_theta"] = 10000.0
			m["rope_scaling"] = map[string]any{"type": "longrope", "short_factor": []float64{1}, "long_factor": []float64{2}}
		}, 60, "longrope"},
		{"phi3 saved longrope", "phi3-tiny", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
				"short_factor": []float64{1}, "long_factor": []float64{2}}
		}, 40, "longrope"},
		{"phi3 hub su", "phi3-tiny", func(m map[string]any) {
			delete(m, "rope_parameters")
			m["rope_scaling"] = map[string]any{"type": "su"}
		}, 0, "longrope"},
		{"glm4 saved", "glm4-tiny", func(m map[string]any) {}, 40, ""},
		{"glm4 hub", "glm4-tiny", func(m map[string]any) { // no factor anywhere: Glm4Config's 0.5
			delete(m, "rope_parameters")
			delete(m, "partial_rotary_factor")
			m["rope_theta"] = 10000.0
		}, 40, ""},
		{"glm4 whole head", "glm4-tiny", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}
		}, 0, ""},
		{"glm4 dynamic", "glm4-tiny", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"type": "dynamic", "factor": 2.0}
		}, 40, "dynamic"},
		{"glm4 linear", "glm4-tiny", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.25}
		}, 20, ""},
		{"gemma3 hub", "gemma3-tiny", func(m map[string]any) {
			delete(m, "rope_parameters")
			m["rope_theta"], m["rope_local_base_freq"], m["rope_scaling"] = 1e6, 1e4, nil
		}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyFixture(t, c.fixture)
			editJSON(t, filepath.Join(dir, ConfigFile), c.edit)
			g, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			a := layer(t, g, "model.layers.0.self_attn")
			if a.Dims["rotary_dim"] != c.rotary || a.Rope != c.rope {
				t.Errorf("rotary_dim %d rope %q, want %d %q", a.Dims["rotary_dim"], a.Rope, c.rotary, c.rope)
			}
		})
	}
	dir := copyFixture(t, "phi3-tiny")
	editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["rope_parameters"] = map[string]any{"rope_type": "yarn2"} })
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `rope type "yarn2"`) {
		t.Errorf("unknown rope type: %v", err)
	}
}

// layerRopeCase is a config edit and what each of a two-layer fixture's attention layers then
// carries: its Rope and its sliding window.
type layerRopeCase struct {
	name   string
	edit   func(m map[string]any)
	rope   [2]string
	window [2]int64
}

func checkLayerRopes(t *testing.T, fixture string, cases []layerRopeCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyFixture(t, fixture)
			editJSON(t, filepath.Join(dir, ConfigFile), c.edit)
			g, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if a := layer(t, g, "model.layers."+itoa(i)+".self_attn"); a.Rope != c.rope[i] || a.Dims["sliding_window"] != c.window[i] {
					t.Errorf("layer %d: rope %q window %d, want %q %d", i, a.Rope, a.Dims["sliding_window"], c.rope[i], c.window[i])
				}
			}
		})
	}
}

// configErrorCase is a config edit Load refuses with an error naming want and config.json.
type configErrorCase struct {
	edit func(m map[string]any)
	want string
}

func checkConfigErrors(t *testing.T, fixture string, cases []configErrorCase) {
	t.Helper()
	for _, c := range cases {
		dir := copyFixture(t, fixture)
		editJSON(t, filepath.Join(dir, ConfigFile), c.edit)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ConfigFile) {
			t.Errorf("want an error naming %q and the config: %v", c.want, err)
		}
	}
}

// SmolLM3's per-layer RoPE and windows: no_rope_layers or its interval, and windows only with
// use_sliding_window, on layer_types' sliding layers (by default the NoPE ones).
func TestSmolLM3Layers(t *testing.T) {
	checkLayerRopes(t, "smollm3-tiny", []layerRopeCase{
		{"fixture", func(m map[string]any) {}, [2]string{"", RopeNone}, [2]int64{0, 16}},
		{"no window", func(m map[string]any) { m["use_sliding_window"] = false }, [2]string{"", RopeNone}, [2]int64{0, 0}},
		{"interval", func(m map[string]any) {
			delete(m, "no_rope_layers")
			delete(m, "layer_types")
			m["no_rope_layer_interval"] = 1.0
		}, [2]string{RopeNone, RopeNone}, [2]int64{16, 16}},
		{"default interval", func(m map[string]any) {
			delete(m, "no_rope_layers")
			delete(m, "no_rope_layer_interval")
			delete(m, "layer_types")
		}, [2]string{"", ""}, [2]int64{0, 0}},
		{"layer_types", func(m map[string]any) { m["layer_types"] = []string{"sliding_attention", "full_attention"} },
			[2]string{"", RopeNone}, [2]int64{16, 0}},
	})
	checkConfigErrors(t, "smollm3-tiny", []configErrorCase{
		{func(m map[string]any) { m["no_rope_layers"] = []int{1} }, "no_rope_layers has 1 entries, num_hidden_layers is 2"},
		{func(m map[string]any) { m["no_rope_layers"] = []int{1, 2} }, "no_rope_layers[1] is 2 (want 1"},
		{func(m map[string]any) {
			delete(m, "no_rope_layers")
			m["no_rope_layer_interval"] = 0
		}, "no_rope_layer_interval is 0, want a positive interval"},
		{func(m map[string]any) { m["sliding_window"] = -3 }, "sliding_window is -3"},
		{func(m map[string]any) { m["layer_types"] = []string{"full_attention", "chunked"} }, `layer_types[1] is "chunked"`},
	})
}

// EXAONE 4's layers: with a window, the sliding ones (layer_types, else every
// sliding_window_pattern-th layer full) keep RoPE and attend within it, the others rotate
// nothing; with sliding_window null every layer rotates and attends in full.
func TestExaone4Layers(t *testing.T) {
	checkLayerRopes(t, "exaone4-tiny", []layerRopeCase{
		{"fixture", func(m map[string]any) {}, [2]string{"", RopeNone}, [2]int64{16, 0}},
		{"no window", func(m map[string]any) { m["sliding_window"] = nil }, [2]string{"", ""}, [2]int64{0, 0}},
		{"pattern", func(m map[string]any) {
			delete(m, "layer_types")
			m["sliding_window_pattern"] = 1.0
		}, [2]string{RopeNone, RopeNone}, [2]int64{0, 0}},
		{"default pattern", func(m map[string]any) {
			delete(m, "layer_types")
			delete(m, "sliding_window_pattern")
		}, [2]string{"", ""}, [2]int64{16, 16}},
		{"layer_types over the pattern", func(m map[string]any) {
			m["layer_types"] = []string{"full_attention", "sliding_attention"}
			m["sliding_window_pattern"] = "LLLG"
		}, [2]string{RopeNone, ""}, [2]int64{0, 16}},
	})
	checkConfigErrors(t, "exaone4-tiny", []configErrorCase{
		{func(m map[string]any) {
			delete(m, "layer_types")
			m["sliding_window_pattern"] = "LLLG"
		}, `sliding_window_pattern is "LLLG" and layer_types is missing`},
		{func(m map[string]any) {
			delete(m, "layer_types")
			m["sliding_window_pattern"] = 0
		}, "sliding_window_pattern is 0"},
		{func(m map[string]any) { m["sliding_window"] = -3 }, "sliding_window is -3"},
		{func(m map[string]any) { m["hidden_act"] = "gelu" }, `hidden_act is "gelu"`},
		{func(m map[string]any) { m["layer_types"] = []string{"full_attention"} }, "layer_types has 1 entries"},
	})
}

// Ministral's windows: layer_types' sliding layers, every layer when it is left out and a window
// is set, none when sliding_window is null (MinistralConfig.__post_init__); every layer rotates.
func TestMinistralLayers(t *testing.T) {
	checkLayerRopes(t, "ministral-tiny", []layerRopeCase{
		{"fixture", func(m map[string]any) {}, [2]string{"", ""}, [2]int64{0, 16}},
		{"no layer_types", func(m map[string]any) { delete(m, "layer_types") }, [2]string{"", ""}, [2]int64{16, 16}},
		{"no window", func(m map[string]any) { m["sliding_window"] = nil }, [2]string{"", ""}, [2]int64{0, 0}},
		{"default window", func(m map[string]any) {
			delete(m, "sliding_window")
			m["layer_types"] = []string{"sliding_attention", "full_attention"}
		}, [2]string{"", ""}, [2]int64{4096, 0}},
	})
	checkConfigErrors(t, "ministral-tiny", []configErrorCase{
		{func(m map[string]any) { m["sliding_window"] = 0 }, "sliding_window is 0"},
		{func(m map[string]any) { m["layer_types"] = []string{"full_attention"} }, "layer_types has 1 entries"},
		{func(m map[string]any) { m["layer_types"] = []string{"full_attention", "chunked_attention"} },
			`layer_types[1] is "chunked_attention"`},
	})
}

// Helium's o_proj is hidden × hidden: a query width other than hidden_size is refused by name.
func TestHeliumQueryWidth(t *testing.T) {
	checkConfigErrors(t, "helium-tiny", []configErrorCase{
		{func(m map[string]any) { m["head_dim"] = 48 }, "num_attention_heads 3 × head_dim 48 is 144, not hidden_size 96"},
	})
}

// Granite's residual_multiplier: a scale of 1 marks nothing, and a scale that is not positive is
// refused naming the field and the config.
func TestGraniteResidualScale(t *testing.T) {
	dir := copyFixture(t, "granite-tiny")
	editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["residual_multiplier"] = 1.0 })
	g, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range g.Layers {
		if l.ResidualScale != 0 {
			t.Errorf("%s: residual scale %g with residual_multiplier 1", l.Module, l.ResidualScale)
		}
	}
	for _, v := range []any{0.0, -0.5} {
		dir := copyFixture(t, "granite-tiny")
		editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["residual_multiplier"] = v })
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "residual_multiplier is") ||
			!strings.Contains(err.Error(), ConfigFile) {
			t.Errorf("residual_multiplier %v: %v", v, err)
		}
	}
}

// Gemma 1's MLP applies hidden_act: the tanh form (GemmaConfig's default) records no
// activation, the exact one records it, and any other is refused naming the field and the config.
func TestGemmaActivation(t *testing.T) {
	for _, c := range []struct {
		act  any // nil: the field left out
		want string
	}{{nil, ""}, {"gelu_pytorch_tanh", ""}, {"gelu", ActGeLUExact}} {
		dir := copyFixture(t, "gemma-tiny")
		editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) {
			delete(m, "hidden_act")
			if c.act != nil {
				m["hidden_act"] = c.act
			}
		})
		g, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range g.Layers {
			if l.Kind == KindMLPGeGLU && l.Activation != c.want {
				t.Errorf("hidden_act %v: %s activation %q, want %q", c.act, l.Module, l.Activation, c.want)
			}
		}
	}
	dir := copyFixture(t, "gemma-tiny")
	editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["hidden_act"] = "silu" })
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `hidden_act is "silu"`) ||
		!strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("hidden_act silu: %v", err)
	}
}

// OLMo 2's MLP is SwiGLU: another hidden_act is refused naming the field and the config.
func TestOLMo2Activation(t *testing.T) {
	dir := copyFixture(t, "olmo2-tiny")
	editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["hidden_act"] = "gelu" })
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `hidden_act is "gelu"`) ||
		!strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("hidden_act gelu: %v", err)
	}
}

// GLM's config refusals: an MLP activation other than silu, and a rotated channel count that
// cannot be split into pairs.
func TestGLMConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		edit func(m map[string]any)
		want string
	}{
		{func(m map[string]any) { m["hidden_act"] = "gelu" }, `hidden_act is "gelu"`},
		{func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.3625}
		}, "rotates 29 channels, want an even count"},
		{func(m map[string]any) { m["num_key_value_heads"] = 2 }, "num_attention_heads 3 is not a multiple of num_key_value_heads 2"},
	} {
		dir := copyFixture(t, "glm4-tiny")
		editJSON(t, filepath.Join(dir, ConfigFile), c.edit)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ConfigFile) {
			t.Errorf("want %q naming %s, got %v", c.want, ConfigFile, err)
		}
	}
}

// OLMoE's config refusals: clip_qkv (the attention here does not clamp), a head_dim that does
// not span hidden_size (q_norm is hidden_size wide), too many experts per token.
func TestOLMoEConfigRefusals(t *testing.T) {
	for _, c := range []struct {
		edit func(m map[string]any)
		want string
	}{
		{func(m map[string]any) { m["clip_qkv"] = 8.0 }, "clip_qkv is 8; the attention here does not clamp"},
		{func(m map[string]any) { m["head_dim"] = 16 }, "head_dim 16 × num_attention_heads 2 is not hidden_size 64"},
		{func(m map[string]any) { m["num_experts_per_tok"] = 6 }, "num_experts_per_tok is 6, want 1 to num_experts (5)"},
	} {
		dir := copyFixture(t, "olmoe-tiny")
		editJSON(t, filepath.Join(dir, ConfigFile), c.edit)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ConfigFile) {
			t.Errorf("want %q naming %s, got %v", c.want, ConfigFile, err)
		}
	}
}
