package plan

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/models"
)

// publishedDir holds config.json files as published checkpoints carry them.
const publishedDir = "../../testdata/published"

// headerOnly writes dir/model.safetensors with the tensors cfg implies for its model_type,
// as a header whose data is a sparse hole: planning reads only headers.
func headerOnly(t *testing.T, dir string, cfg map[string]any) {
	t.Helper()
	n := func(k string) int64 { v, _ := cfg[k].(float64); return int64(v) }
	h, heads, layers, inter, vocab := n("hidden_size"), n("num_attention_heads"), n("num_hidden_layers"), n("intermediate_size"), n("vocab_size")
	kv, hd := n("num_key_value_heads"), n("head_dim")
	if kv == 0 {
		kv = heads
	}
	if hd == 0 {
		hd = h / heads
	}
	var ts []*models.Tensor
	add := func(name string, shape ...int64) {
		ts = append(ts, &models.Tensor{Name: name, DType: models.BF16, Shape: shape})
	}
	mt := cfg["model_type"].(string)
	add("model.embed_tokens.weight", vocab, h)
	glm := mt == "glm" || mt == "glm4"
	if tied, _ := cfg["tie_word_embeddings"].(bool); !tied && (mt == "phi3" || mt == "olmo2" || mt == "olmoe" || mt == "flex_olmo" || mt == "seed_oss" || mt == "exaone4" || mt == "ministral" || mt == "hunyuan_v1_dense" || mt == "helium" || mt == "granitemoe" || glm) {
		add("lm_head.weight", vocab, h)
	}
	add("model.norm.weight", h)
	for l := int64(0); l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		if mt != "olmo2" && mt != "exaone4" && mt != "flex_olmo" {
			add(p+"input_layernorm.weight", h)
		}
		add(p+"post_attention_layernorm.weight", h)
		add(p+"self_attn.o_proj.weight", h, heads*hd)
		if mt == "flex_olmo" {
			add(p+"post_feedforward_layernorm.weight", h)
		}
		if mt != "olmoe" && mt != "flex_olmo" && mt != "granitemoe" {
			add(p+"mlp.down_proj.weight", h, inter)
		}
		if mt == "phi3" {
			add(p+"self_attn.qkv_proj.weight", (heads+2*kv)*hd, h)
			add(p+"mlp.gate_up_proj.weight", 2*inter, h)
			continue
		}
		if glm {
			add(p+"self_attn.q_proj.weight", heads*hd, h)
			add(p+"self_attn.k_proj.weight", kv*hd, h)
			add(p+"self_attn.v_proj.weight", kv*hd, h)
			add(p+"self_attn.q_proj.bias", heads*hd)
			add(p+"self_attn.k_proj.bias", kv*hd)
			add(p+"self_attn.v_proj.bias", kv*hd)
			add(p+"mlp.gate_up_proj.weight", 2*inter, h)
			if mt == "glm4" {
				add(p+"post_self_attn_layernorm.weight", h)
				add(p+"post_mlp_layernorm.weight", h)
			}
			continue
		}
		if mt == "granitemoe" { // the experts stacked, one tensor a projection
			experts := n("num_local_experts")
			add(p+"block_sparse_moe.router.layer.weight", experts, h)
			add(p+"block_sparse_moe.input_linear.weight", experts, 2*inter, h)
			add(p+"block_sparse_moe.output_linear.weight", experts, h, inter)
			add(p+"self_attn.q_proj.weight", heads*hd, h)
			add(p+"self_attn.k_proj.weight", kv*hd, h)
			add(p+"self_attn.v_proj.weight", kv*hd, h)
			continue
		}
		if mt == "olmoe" || mt == "flex_olmo" {
			experts := n("num_experts")
			add(p+"mlp.gate.weight", experts, h)
			for e := int64(0); e < experts; e++ {
				add(fmt.Sprintf("%smlp.experts.%d.gate_proj.weight", p, e), inter, h)
				add(fmt.Sprintf("%smlp.experts.%d.up_proj.weight", p, e), inter, h)
				add(fmt.Sprintf("%smlp.experts.%d.down_proj.weight", p, e), h, inter)
			}
			add(p+"self_attn.q_proj.weight", heads*hd, h)
			add(p+"self_attn.k_proj.weight", kv*hd, h)
			add(p+"self_attn.v_proj.weight", kv*hd, h)
			add(p+"self_attn.q_norm.weight", heads*hd)
			add(p+"self_attn.k_norm.weight", kv*hd)
			continue
		}
		if mt == "gemma2" || mt == "gemma3_text" {
			add(p+"pre_feedforward_layernorm.weight", h)
		}
		if mt == "gemma2" || mt == "gemma3_text" || mt == "olmo2" || mt == "exaone4" {
			add(p+"post_feedforward_layernorm.weight", h)
		}
		add(p+"self_attn.q_proj.weight", heads*hd, h)
		add(p+"self_attn.k_proj.weight", kv*hd, h)
		add(p+"self_attn.v_proj.weight", kv*hd, h)
		add(p+"mlp.gate_proj.weight", inter, h)
		add(p+"mlp.up_proj.weight", inter, h)
		if mt == "seed_oss" {
			add(p+"self_attn.q_proj.bias", heads*hd)
			add(p+"self_attn.k_proj.bias", kv*hd)
			add(p+"self_attn.v_proj.bias", kv*hd)
		}
		if mt == "gemma3_text" || mt == "exaone4" {
			add(p+"self_attn.q_norm.weight", hd)
			add(p+"self_attn.k_norm.weight", hd)
		}
		if mt == "olmo2" {
			add(p+"self_attn.q_norm.weight", heads*hd)
			add(p+"self_attn.k_norm.weight", kv*hd)
		}
		if mt == "hunyuan_v1_dense" {
			add(p+"self_attn.query_layernorm.weight", hd)
			add(p+"self_attn.key_layernorm.weight", hd)
		}
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off, err := models.WriteHeader(f, ts, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, tt := range ts {
		data += 2 * tt.Elems()
	}
	if err := f.Truncate(off + data); err != nil {
		t.Fatal(err)
	}
}

// TestPublishedConfigs plans the published Gemma 2, Gemma 3 and Phi-3 / Phi-4-mini layouts, and
// SmolLM3-3B's and gemma-7b's from their config classes' defaults, and checks what each family gets: which
// layers run our kernels and why the rest stay.
func TestPublishedConfigs(t *testing.T) {
	cases := map[string]struct {
		kernel, kept int
		attnReason   []string // in the reason of every attention layer's keep
		check        func(t *testing.T, p *Plan)
		config       string // config.json itself, for a layout with no published copy here
	}{
		// 26 layers × (4 norms + MLP + attention) + final norm + lm_head on our kernels, attention
		// at head_dim 256 with its soft-capping and windows; the embedding kept.
		"google--gemma-2-2b": {26*6 + 2, 1, nil, func(t *testing.T, p *Plan) {
			// even layers slide (Gemma2Config's default pattern: the Hub config has no layer_types)
			for i, window := range map[int]bool{0: true, 1: false} {
				r := layerPlan(t, p, fmt.Sprintf("model.layers.%d.self_attn", i)).Reason
				if !strings.Contains(r, "soft-capping (tanh, cap 50) in the kernels") ||
					strings.Contains(r, "sliding window 4096") != window {
					t.Errorf("layer %d attention reason %q, want the cap and a window: %v", i, r, window)
				}
			}
		}, ""},
		"google--gemma-3-1b-it": {26*6 + 2, 1, nil, func(t *testing.T, p *Plan) {
			// layer 0 slides, layer 5 is the first full-attention one (sliding_window_pattern 6)
			for i, want := range map[int]string{0: "sliding window 512", 5: "by gemm"} {
				if r := layerPlan(t, p, fmt.Sprintf("model.layers.%d.self_attn", i)).Reason; !strings.Contains(r, want) {
					t.Errorf("layer %d attention reason %q, want %q", i, r, want)
				}
			}
		}, ""},
		// every layer on our kernels, attention with its window of 2047; the embedding kept
		"microsoft--Phi-3-mini-4k-instruct": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.0.self_attn")
			if a.Layer != "FusedAttention" || !strings.Contains(a.Reason, "sliding window 2047") {
				t.Errorf("attention: layer %s, reason %q, want FusedAttention with its sliding window", a.Layer, a.Reason)
			}
			m := layerPlan(t, p, "model.layers.0.mlp")
			if m.Layer != "FusedSwiGLUMLP" || len(m.Outputs) != 2 || fmt.Sprint(m.Outputs[0].Split) != "[8192 8192]" ||
				len(m.Outputs[0].Sources) != 1 || fmt.Sprint(m.Outputs[0].Transforms) != "[prepack-kmajor]" {
				t.Errorf("fused gate_up: %+v", m)
			}
		}, ""},
		// partial rotary is in the rope kernels: only LongRoPE's host-side factor choice keeps attention
		"microsoft--Phi-4-mini-instruct": {32*3 + 2, 32 + 1, []string{"longrope RoPE picks its factors"}, nil, ""},
		// SmolLM3-3B's shape as SmolLM3Config's defaults give it (transformers 5.17
		// configuration_smollm3.py): every fourth layer NoPE, on our kernels like the others
		"SmolLM3Config defaults": {36*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			for i := range 36 {
				a := layerPlan(t, p, fmt.Sprintf("model.layers.%d.self_attn", i))
				nope := (i+1)%4 == 0
				if a.Layer != "Attention" || strings.Contains(a.Reason, "NoPE") != nope || strings.Contains(a.Reason, "sliding") {
					t.Errorf("layer %d attention: layer %s, reason %q, want NoPE %v and no window", i, a.Layer, a.Reason, nope)
				}
			}
		}, `{"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048,
			"intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
			"tie_word_embeddings": true}`},
		// gemma-7b's shape as GemmaConfig's defaults give it (transformers 5.17
		// configuration_gemma.py), with the published checkpoints' hidden_act "gelu": Llama's
		// block on Gemma's norms, every layer on our kernels, the exact gelu in the GEMM epilogue
		"GemmaConfig defaults, hidden_act gelu": {28*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			m := layerPlan(t, p, "model.layers.27.mlp")
			if m.Layer != "GeGLUMLP" || !strings.Contains(m.Reason, "geglu_erf epilogue") ||
				!strings.Contains(m.Reason, "residual add in its epilogue") {
				t.Errorf("mlp: layer %s, reason %q", m.Layer, m.Reason)
			}
			n := layerPlan(t, p, "model.layers.27.post_attention_layernorm")
			if n.Kernel != "add-rmsnorm" || len(n.Bindings) != 2 || n.Bindings[1].Layer != "DecoderLayer" ||
				n.Bindings[1].Class != "GemmaDecoderLayer" {
				t.Errorf("post-attention norm: kernel %s, bindings %+v", n.Kernel, n.Bindings)
			}
		}, `{"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072,
			"intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
			"head_dim": 256, "hidden_act": "gelu", "tie_word_embeddings": true}`},
		// Olmo2Config's defaults (transformers 5.17 configuration_olmo2.py, which names
		// allenai/OLMo-2-1124-7B as its checkpoint): no input norms, a norm after each branch in
		// fp32 order, the q/k norms over all 32 heads at once; every layer but the embedding ours,
		// the stock block's residual adds kept
		"Olmo2Config defaults": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.31.self_attn")
			if a.Layer != "Attention" || len(a.Bindings) != 3 || a.Bindings[1].Layer != "FP32RMSNorm" ||
				!strings.Contains(a.Reason, "q_norm and k_norm over the whole projection") {
				t.Errorf("attention: layer %s, bindings %+v, reason %q", a.Layer, a.Bindings, a.Reason)
			}
			// each post-branch norm with its residual add; the first binds the block for both
			for m, binds := range map[string]int{"model.layers.31.post_attention_layernorm": 2, "model.layers.31.post_feedforward_layernorm": 1} {
				n := layerPlan(t, p, m)
				if n.Kernel != "rmsnorm-add" || n.Layer != "FP32RMSNorm" || len(n.Bindings) != binds ||
					(binds == 2 && n.Bindings[1].Layer != "PostNormDecoderLayer") {
					t.Errorf("%s: kernel %s, layer %s, bindings %+v", m, n.Kernel, n.Layer, n.Bindings)
				}
			}
			if n := layerPlan(t, p, "model.norm"); n.Kernel != "rmsnorm" || n.Layer != "FP32RMSNorm" {
				t.Errorf("final norm: kernel %s, layer %s", n.Kernel, n.Layer)
			}
			if m := layerPlan(t, p, "model.layers.31.mlp"); m.Layer != "SwiGLUMLP" || strings.Contains(m.Reason, "residual add") {
				t.Errorf("mlp: layer %s, reason %q", m.Layer, m.Reason)
			}
		}, `{"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 50304, "hidden_size": 4096,
			"intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "rms_norm_eps": 1e-5}`},
		// Glm4Config's defaults (transformers 5.17 configuration_glm4.py: GLM-4-9B's shape) in the
		// Hub's spelling (top-level rope_theta and partial_rotary_factor): four norms, attention,
		// MLP per layer on our kernels, the rotated half of each head reordered offline; the add
		// before post_attention_layernorm fused with it (SandwichDecoderLayer), and the one after
		// post_mlp_layernorm with that norm; the MLP a module
		"Glm4Config defaults": {40*6 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.39.self_attn")
			if a.Layer != "Attention" || !slices.Equal(a.Outputs[0].Transforms, []string{TConcatQKV, TRopeDeinterleave, TPrepackKMajor}) ||
				!slices.Equal(a.Outputs[1].Transforms, []string{TConcatQKV, TRopeDeinterleave}) || a.Dims["rotary_dim"] != 64 ||
				!strings.Contains(a.Reason, "partial rotary: 64 of 128") || !strings.Contains(a.Reason, "interleaved rotary pairs") {
				t.Errorf("attention: layer %s, outputs %+v, dims %v, reason %q", a.Layer, a.Outputs, a.Dims, a.Reason)
			}
			for m, kernel := range map[string]string{"input_layernorm": "rmsnorm", "post_self_attn_layernorm": "rmsnorm",
				"post_mlp_layernorm": "rmsnorm-add"} {
				if n := layerPlan(t, p, "model.layers.39."+m); n.Kernel != kernel || n.Layer != "RMSNorm" || len(n.Bindings) != 1 {
					t.Errorf("%s: kernel %s, layer %s, bindings %+v", m, n.Kernel, n.Layer, n.Bindings)
				}
			}
			n := layerPlan(t, p, "model.layers.39.post_attention_layernorm")
			if n.Kernel != "add-rmsnorm" || len(n.Bindings) != 2 || n.Bindings[1].Layer != "SandwichDecoderLayer" ||
				n.Bindings[1].Module != "model.layers.39" {
				t.Errorf("post_attention_layernorm: kernel %s, bindings %+v", n.Kernel, n.Bindings)
			}
			if m := layerPlan(t, p, "model.layers.39.mlp"); m.Layer != "FusedSwiGLUMLP" || strings.Contains(m.Reason, "residual add") {
				t.Errorf("mlp: layer %s, reason %q", m.Layer, m.Reason)
			}
		}, `{"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "vocab_size": 151552, "hidden_size": 4096,
			"intermediate_size": 13696, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2,
			"head_dim": 128, "attention_bias": true, "partial_rotary_factor": 0.5, "rope_theta": 10000.0,
			"rms_norm_eps": 1e-5, "tie_word_embeddings": false}`},
		// Exaone4Config's defaults (configuration_exaone4.py): 32 layers, every fourth global with
		// no RoPE, the others sliding over 4096 keys; each branch's norm with its residual add
		// (PostNormDecoderLayer, Llama's rounding), the per-head q/k norms inside the attention
		"Exaone4Config defaults": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			for i, want := range map[int]string{2: "sliding window 4096", 3: "no RoPE on this layer (NoPE)"} {
				a := layerPlan(t, p, fmt.Sprintf("model.layers.%d.self_attn", i))
				if a.Layer != "Attention" || !strings.Contains(a.Reason, want) || strings.Contains(a.Reason, "NoPE") != (i == 3) ||
					slices.Contains(a.Bindings[0].Reads, "is_sliding") != (i == 3) {
					t.Errorf("layer %d attention: layer %s, reason %q, reads %v", i, a.Layer, a.Reason, a.Bindings[0].Reads)
				}
			}
			n := layerPlan(t, p, "model.layers.3.post_attention_layernorm")
			if n.Kernel != "rmsnorm-add" || n.Layer != "RMSNorm" || len(n.Bindings) != 2 || n.Bindings[1].Layer != "PostNormDecoderLayer" {
				t.Errorf("post_attention_layernorm: kernel %s, layer %s, bindings %+v", n.Kernel, n.Layer, n.Bindings)
			}
			if n := layerPlan(t, p, "model.layers.3.post_feedforward_layernorm"); n.Kernel != "rmsnorm-add" || len(n.Bindings) != 1 {
				t.Errorf("post_feedforward_layernorm: kernel %s, bindings %+v", n.Kernel, n.Bindings)
			}
		}, `{"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "vocab_size": 102400, "hidden_size": 4096,
			"intermediate_size": 16384, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
			"rms_norm_eps": 1e-5, "sliding_window": 4096, "sliding_window_pattern": 4, "tie_word_embeddings": false}`},
		// A hybrid EXAONE 4.0 config as a checkpoint saved with layer_types carries it: the pattern
		// as a string (which layer_types then overrides), Llama 3's RoPE scaling, GQA 5, 8 layers
		"EXAONE 4.0 hybrid config": {8*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			for i := range 8 {
				a := layerPlan(t, p, fmt.Sprintf("model.layers.%d.self_attn", i))
				global := i%4 == 3
				if a.Layer != "Attention" || strings.Contains(a.Reason, "NoPE") != global ||
					strings.Contains(a.Reason, "sliding window 4096") == global {
					t.Errorf("layer %d attention: layer %s, reason %q", i, a.Layer, a.Reason)
				}
			}
		}, `{"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "vocab_size": 102400, "hidden_size": 5120,
			"intermediate_size": 27392, "num_hidden_layers": 8, "num_attention_heads": 40, "num_key_value_heads": 8,
			"head_dim": 128, "rms_norm_eps": 1e-5, "sliding_window": 4096, "sliding_window_pattern": "LLLG",
			"layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
				"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
			"rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
				"original_max_position_embeddings": 8192}, "rope_theta": 1000000.0, "tie_word_embeddings": false}`},
		// OlmoeConfig's defaults (configuration_olmoe.py): 16 layers of 64
		// experts, top-8 without renormalization, every layer sparse; q/k norms over the whole
		// projection in Llama's order; the add before each sparse block fused (DecoderLayer)
		"OlmoeConfig defaults": {16*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			m := layerPlan(t, p, "model.layers.15.mlp")
			if m.Kernel != "moe" || m.Layer != "SparseMoE" || m.Router != "softmax-topk" || m.Dims["experts"] != 64 ||
				m.Dims["top_k"] != 8 || m.Dims["intermediate"] != 2048 {
				t.Errorf("moe: kernel %s, layer %s, router %s, dims %v", m.Kernel, m.Layer, m.Router, m.Dims)
			}
			a := layerPlan(t, p, "model.layers.15.self_attn")
			if len(a.Bindings) != 3 || a.Bindings[1].Layer != "RMSNorm" || !strings.Contains(a.Reason, "q_norm and k_norm over the whole projection") {
				t.Errorf("attention: bindings %+v, reason %q", a.Bindings, a.Reason)
			}
			if n := layerPlan(t, p, "model.layers.15.post_attention_layernorm"); n.Kernel != "add-rmsnorm" || n.Bindings[1].Layer != "DecoderLayer" {
				t.Errorf("post_attention_layernorm: kernel %s, bindings %+v", n.Kernel, n.Bindings)
			}
		}, `{"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": 50304, "hidden_size": 2048,
			"intermediate_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16, "num_experts": 64,
			"num_experts_per_tok": 8, "rms_norm_eps": 1e-5}`},
		// FlexOlmoConfig's defaults (configuration_flex_olmo.py, FlexOlmo-7x7B-1T's shape): OLMo 2's
		// block (each branch's norm with its add, PostNormMoEDecoderLayer) around 7 experts, top-5
		"FlexOlmoConfig defaults": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			m := layerPlan(t, p, "model.layers.31.mlp")
			if m.Kernel != "moe" || m.Layer != "SparseMoE" || m.Router != "softmax-topk" || m.Dims["experts"] != 7 ||
				m.Dims["top_k"] != 5 || m.Dims["intermediate"] != 11008 {
				t.Errorf("moe: kernel %s, layer %s, router %s, dims %v", m.Kernel, m.Layer, m.Router, m.Dims)
			}
			n := layerPlan(t, p, "model.layers.31.post_feedforward_layernorm")
			if n.Kernel != "rmsnorm-add" || n.Layer != "FP32RMSNorm" {
				t.Errorf("post_feedforward_layernorm: kernel %s, layer %s", n.Kernel, n.Layer)
			}
			n = layerPlan(t, p, "model.layers.31.post_attention_layernorm")
			if len(n.Bindings) != 2 || n.Bindings[1].Layer != "PostNormMoEDecoderLayer" {
				t.Errorf("post_attention_layernorm: bindings %+v", n.Bindings)
			}
		}, `{"architectures": ["FlexOlmoForCausalLM"], "model_type": "flex_olmo", "vocab_size": 100352, "hidden_size": 4096,
			"intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_experts": 7,
			"num_experts_per_tok": 5, "rms_norm_eps": 1e-6}`},
		// GraniteMoeConfig's defaults (configuration_granitemoe.py) with Granite 3's residual
		// multiplier: 32 layers of 8 experts, top-2, stacked in the checkpoint (packed from views);
		// RouterMoE on the block, ScaledMoEDecoderLayer around it
		"GraniteMoeConfig defaults": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			m := layerPlan(t, p, "model.layers.31.block_sparse_moe")
			if m.Kernel != "moe" || m.Layer != "RouterMoE" || m.Router != "softmax-topk-norm" || m.Dims["experts"] != 8 ||
				m.Dims["top_k"] != 2 || m.Dims["intermediate"] != 11008 ||
				m.Outputs[1].Sources[1] != "model.layers.31.block_sparse_moe.input_linear.weight[0][11008:22016]" {
				t.Errorf("moe: kernel %s, layer %s, router %s, dims %v, outputs %+v", m.Kernel, m.Layer, m.Router, m.Dims, m.Outputs)
			}
			n := layerPlan(t, p, "model.layers.31.post_attention_layernorm")
			if len(n.Bindings) != 2 || n.Bindings[1].Layer != "ScaledMoEDecoderLayer" {
				t.Errorf("post_attention_layernorm: bindings %+v", n.Bindings)
			}
		}, `{"architectures": ["GraniteMoeForCausalLM"], "model_type": "granitemoe", "vocab_size": 32000, "hidden_size": 4096,
			"intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_local_experts": 8,
			"num_experts_per_tok": 2, "rms_norm_eps": 1e-6, "residual_multiplier": 0.22}`},
		// Ernie4_5Config's defaults (configuration_ernie4_5.py, ERNIE-4.5-0.3B's shape): Llama's
		// block, every channel of each head rotating in adjacent pairs, reordered offline; tied
		"Ernie4_5Config defaults": {18*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.17.self_attn")
			if !slices.Equal(a.Outputs[0].Transforms, []string{TConcatQKV, TRopeDeinterleave, TPrepackKMajor}) ||
				a.Dims["rotary_dim"] != 0 || a.Dims["head_dim"] != 128 || a.Dims["kv_heads"] != 2 {
				t.Errorf("attention outputs %+v, dims %v", a.Outputs, a.Dims)
			}
			if n := layerPlan(t, p, "model.layers.17.post_attention_layernorm"); n.Kernel != "add-rmsnorm" {
				t.Errorf("post_attention_layernorm: kernel %s", n.Kernel)
			}
		}, `{"architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5", "vocab_size": 103424, "hidden_size": 1024,
			"intermediate_size": 3072, "num_hidden_layers": 18, "num_attention_heads": 16, "num_key_value_heads": 2,
			"head_dim": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": true}`},
		// HeliumConfig's defaults (configuration_helium.py, helium-1-2b's shape): every norm
		// rounding once after its weight, the add before the post-attention one fused (patched
		// block); each head's rows reordered for its adjacent rotary pairs
		"HeliumConfig defaults": {24*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.23.self_attn")
			if a.Layer != "Attention" || !slices.Contains(a.Outputs[0].Transforms, "rope-deinterleave") {
				t.Errorf("attention: layer %s, outputs %+v", a.Layer, a.Outputs)
			}
			n := layerPlan(t, p, "model.layers.23.post_attention_layernorm")
			if n.Kernel != "add-rmsnorm" || n.Layer != "FP32RMSNorm" || len(n.Bindings) != 2 || n.Bindings[1].Layer != "DecoderLayer" {
				t.Errorf("post_attention_layernorm: kernel %s, layer %s, bindings %+v", n.Kernel, n.Layer, n.Bindings)
			}
			if m := layerPlan(t, p, "model.layers.23.mlp"); !strings.Contains(m.Reason, "residual add in its epilogue") {
				t.Errorf("mlp: reason %q", m.Reason)
			}
		}, `{"architectures": ["HeliumForCausalLM"], "model_type": "helium", "vocab_size": 48000, "hidden_size": 2560,
			"intermediate_size": 7040, "num_hidden_layers": 24, "num_attention_heads": 20, "num_key_value_heads": 20,
			"head_dim": 128, "rms_norm_eps": 1e-8, "tie_word_embeddings": false}`},
		// HunYuanDenseV1Config's defaults (configuration_hunyuan_v1_dense.py): Llama's block, the
		// per-head q/k norms after RoPE inside the attention's launch (bound with it)
		"HunYuanDenseV1Config defaults": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.31.self_attn")
			if a.Layer != "Attention" || !strings.Contains(a.Reason, "q/k norms on the rotated heads, after RoPE") ||
				len(a.Bindings) != 3 || a.Bindings[1].Module != "model.layers.31.self_attn.query_layernorm" ||
				a.Bindings[2].Layer != "RMSNorm" {
				t.Errorf("attention: layer %s, reason %q, bindings %+v", a.Layer, a.Reason, a.Bindings)
			}
		}, `{"architectures": ["HunYuanDenseV1ForCausalLM"], "model_type": "hunyuan_v1_dense", "vocab_size": 290943,
			"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
			"rms_norm_eps": 1e-5, "tie_word_embeddings": false}`},
		// A Hunyuan-7B-shaped config as the Hub spells it: rope_scaling with alpha, GQA 4,
		// head_dim 128, tied embeddings, 8 of its layers
		"Hunyuan 7B shape": {8*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			if a := layerPlan(t, p, "model.layers.7.self_attn"); a.Layer != "Attention" || a.Dims["kv_heads"] != 8 {
				t.Errorf("attention: layer %s, dims %v", a.Layer, a.Dims)
			}
		}, `{"architectures": ["HunYuanDenseV1ForCausalLM"], "model_type": "hunyuan_v1_dense", "vocab_size": 128167,
			"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 8, "num_attention_heads": 32,
			"num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
			"rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic"}, "attention_bias": false,
			"mlp_bias": false, "tie_word_embeddings": true}`},
		// MinistralConfig's defaults (configuration_ministral.py): Mistral's block, every layer
		// sliding over 4096 keys when layer_types is left out
		"MinistralConfig defaults": {32*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			if a := layerPlan(t, p, "model.layers.31.self_attn"); a.Layer != "Attention" || !strings.Contains(a.Reason, "sliding window 4096") {
				t.Errorf("attention: layer %s, reason %q", a.Layer, a.Reason)
			}
		}, `{"architectures": ["MinistralForCausalLM"], "model_type": "ministral", "vocab_size": 32000, "hidden_size": 4096,
			"intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
			"rms_norm_eps": 1e-6, "sliding_window": 4096, "tie_word_embeddings": false}`},
		// Ministral-8B's shape with its sliding layers interleaved by layer_types (three sliding
		// over 32768 keys, then one full), head_dim 128 of its own
		"Ministral 8B interleaved": {8*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			for i := range 8 {
				a := layerPlan(t, p, fmt.Sprintf("model.layers.%d.self_attn", i))
				if a.Layer != "Attention" || strings.Contains(a.Reason, "sliding window 32768") == (i%4 == 3) {
					t.Errorf("layer %d attention: layer %s, reason %q", i, a.Layer, a.Reason)
				}
			}
		}, `{"architectures": ["MinistralForCausalLM"], "model_type": "ministral", "vocab_size": 131072, "hidden_size": 4096,
			"intermediate_size": 12288, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 8,
			"head_dim": 128, "rms_norm_eps": 1e-5, "rope_theta": 100000000.0, "sliding_window": 32768,
			"layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
				"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
			"tie_word_embeddings": false}`},
		// SeedOssConfig's defaults (configuration_seed_oss.py, Seed-OSS-36B's shape): Llama's
		// modules, q/k/v biased, o_proj not, GQA 10, head_dim 128 of its own
		"SeedOssConfig defaults": {64*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			a := layerPlan(t, p, "model.layers.63.self_attn")
			if len(a.Outputs) != 3 || a.Outputs[1].Name != "model.layers.63.self_attn.qkv_proj.bias" || a.Dims["head_dim"] != 128 {
				t.Errorf("attention outputs %+v, dims %v", a.Outputs, a.Dims)
			}
		}, `{"architectures": ["SeedOssForCausalLM"], "model_type": "seed_oss", "vocab_size": 155136, "hidden_size": 4096,
			"intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 80, "num_key_value_heads": 8,
			"head_dim": 128, "attention_bias": true, "rms_norm_eps": 1e-6}`},
		// GlmConfig's defaults (configuration_glm.py): Llama's block, so the norm after the
		// attention's residual add takes the add with it (the decoder layer bound)
		"GlmConfig defaults": {40*4 + 2, 1, nil, func(t *testing.T, p *Plan) {
			n := layerPlan(t, p, "model.layers.39.post_attention_layernorm")
			if n.Kernel != "add-rmsnorm" || len(n.Bindings) != 2 || n.Bindings[1].Layer != "DecoderLayer" {
				t.Errorf("post_attention_layernorm: kernel %s, bindings %+v", n.Kernel, n.Bindings)
			}
			if a := layerPlan(t, p, "model.layers.0.self_attn"); !slices.Contains(a.Outputs[0].Transforms, TRopeDeinterleave) {
				t.Errorf("attention outputs %+v", a.Outputs)
			}
		}, `{"architectures": ["GlmForCausalLM"], "model_type": "glm", "vocab_size": 151552, "hidden_size": 4096,
			"intermediate_size": 13696, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2,
			"head_dim": 128, "attention_bias": true, "rms_norm_eps": 1.5625e-07}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			raw := []byte(c.config)
			if c.config == "" {
				var err error
				if raw, err = os.ReadFile(filepath.Join(publishedDir, name, "config.json")); err != nil {
					t.Fatal(err)
				}
			}
			var cfg map[string]any
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
			headerOnly(t, dir, cfg)
			g, err := models.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			p, err := New(g, nil, Options{Tool: "xpuinject (test)"})
			if err != nil {
				t.Fatal(err)
			}
			checkPlanInvariants(t, g, p)
			got := p.Counts()
			if got.Kernel != c.kernel || got.Kept != c.kept {
				t.Errorf("%v, want %d on our kernels and %d kept", got, c.kernel, c.kept)
			}
			for _, l := range p.Layers {
				if l.Kind != string(models.KindAttention) {
					continue
				}
				for _, want := range c.attnReason {
					if l.Kernel != KernelKeep || !strings.Contains(l.Reason, want) {
						t.Errorf("%s: kernel %s, reason %q, want kept with %q", l.Module, l.Kernel, l.Reason, want)
					}
				}
			}
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
}

func layerPlan(t *testing.T, p *Plan, module string) LayerPlan {
	t.Helper()
	for _, l := range p.Layers {
		if l.Module == module {
			return l
		}
	}
	t.Fatalf("no layer %s in the plan", module)
	return LayerPlan{}
}

// An attention whose q/k norms follow RoPE, of a class contract.json's qk_norms_after_rope does
// not list, stays on the stock path saying so: the package would run its norms before RoPE.
func TestQKNormAfterRopeNeedsTheContract(t *testing.T) {
	g, err := models.Load("../../testdata/fixtures/hunyuan-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for i := range g.Layers {
		if g.Layers[i].Kind == models.KindAttention {
			g.Layers[i].Class = "LlamaAttention"
		}
	}
	p, err := New(g, nil, Options{Tool: "xpuinject (test)"})
	if err != nil {
		t.Fatal(err)
	}
	a := layerPlan(t, p, "model.layers.0.self_attn")
	if a.Kernel != KernelKeep || !strings.Contains(a.Reason, "qk_norms_after_rope does not list LlamaAttention") {
		t.Errorf("attention: kernel %s, reason %q", a.Kernel, a.Reason)
	}
}
