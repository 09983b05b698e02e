package plan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// gb builds hand-made graphs: tensors go into the checkpoint index, layers name them.
type gb struct {
	ck     *models.Checkpoint
	layers []models.Layer
}

func newGB(arch string) *gb {
	return &gb{ck: &models.Checkpoint{Dir: "/x", ModelType: arch, Tensors: map[string]*models.Tensor{}}}
}

func (b *gb) t(name string, dt models.DType, shape ...int64) string {
	b.ck.Tensors[name] = &models.Tensor{Name: name, DType: dt, Shape: shape}
	return name
}

func (b *gb) add(l models.Layer) { b.layers = append(b.layers, l) }

func (b *gb) graph() *models.Graph {
	return &models.Graph{Arch: b.ck.ModelType, Checkpoint: b.ck, Layers: b.layers}
}

type llamaCfg struct {
	hidden, heads, kv, hd, inter, vocab int64
	blocks                              int
	dt                                  models.DType
	bias, qkNorm, tied                  bool
}

var tiny = llamaCfg{hidden: 64, heads: 2, kv: 1, hd: 32, inter: 160, vocab: 512, blocks: 2, dt: models.F32}

// llama builds a Llama-family graph laid out as models lays it out.
func llama(c llamaCfg) *gb {
	b := newGB("llama")
	dt := c.dt
	b.add(models.Layer{Module: "model.embed_tokens", Kind: models.KindEmbedding, Class: "Embedding", Block: -1,
		Tensors: map[string]string{"weight": b.t("model.embed_tokens.weight", dt, c.vocab, c.hidden)},
		Dims:    map[string]int64{"hidden": c.hidden, "vocab": c.vocab}})
	norm := func(m string, block int) {
		l := models.Layer{Module: m, Kind: models.KindRMSNorm, Class: "LlamaRMSNorm", Block: block, Eps: 1e-6,
			Tensors: map[string]string{"weight": b.t(m+".weight", dt, c.hidden)}, Dims: map[string]int64{"hidden": c.hidden}}
		if block >= 0 {
			l.BlockClass = "LlamaDecoderLayer"
		}
		b.add(l)
	}
	for i := 0; i < c.blocks; i++ {
		p := fmt.Sprintf("model.layers.%d", i)
		norm(p+".input_layernorm", i)
		a := p + ".self_attn"
		ts := map[string]string{
			"q_proj.weight": b.t(a+".q_proj.weight", dt, c.heads*c.hd, c.hidden),
			"k_proj.weight": b.t(a+".k_proj.weight", dt, c.kv*c.hd, c.hidden),
			"v_proj.weight": b.t(a+".v_proj.weight", dt, c.kv*c.hd, c.hidden),
			"o_proj.weight": b.t(a+".o_proj.weight", dt, c.hidden, c.heads*c.hd),
		}
		if c.bias {
			ts["q_proj.bias"] = b.t(a+".q_proj.bias", dt, c.heads*c.hd)
			ts["k_proj.bias"] = b.t(a+".k_proj.bias", dt, c.kv*c.hd)
			ts["v_proj.bias"] = b.t(a+".v_proj.bias", dt, c.kv*c.hd)
		}
		var children map[string]string
		if c.qkNorm {
			ts["q_norm.weight"] = b.t(a+".q_norm.weight", dt, c.hd)
			ts["k_norm.weight"] = b.t(a+".k_norm.weight", dt, c.hd)
			children = map[string]string{"q_norm": "LlamaRMSNorm", "k_norm": "LlamaRMSNorm"}
		}
		b.add(models.Layer{Module: a, Kind: models.KindAttention, Class: "LlamaAttention", Block: i, Bias: c.bias, Tensors: ts,
			BlockClass: "LlamaDecoderLayer", Children: children,
			Dims: map[string]int64{"hidden": c.hidden, "heads": c.heads, "kv_heads": c.kv, "head_dim": c.hd}})
		norm(p+".post_attention_layernorm", i)
		m := p + ".mlp"
		b.add(models.Layer{Module: m, Kind: models.KindMLPSwiGLU, Class: "LlamaMLP", Block: i, BlockClass: "LlamaDecoderLayer",
			Tensors: map[string]string{
				"gate_proj.weight": b.t(m+".gate_proj.weight", dt, c.inter, c.hidden),
				"up_proj.weight":   b.t(m+".up_proj.weight", dt, c.inter, c.hidden),
				"down_proj.weight": b.t(m+".down_proj.weight", dt, c.hidden, c.inter),
			},
			Dims: map[string]int64{"hidden": c.hidden, "intermediate": c.inter}})
	}
	norm("model.norm", -1)
	head := "model.embed_tokens.weight"
	if !c.tied {
		head = b.t("lm_head.weight", dt, c.vocab, c.hidden)
	}
	b.add(models.Layer{Module: "lm_head", Kind: models.KindLMHead, Class: "Linear", Block: -1, Tied: c.tied,
		Tensors: map[string]string{"weight": head}, Dims: map[string]int64{"hidden": c.hidden, "vocab": c.vocab}})
	return b
}

func mustPlan(t *testing.T, g *models.Graph, opts Options) *Plan {
	t.Helper()
	p, err := New(g, nil, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func layerOf(t *testing.T, p *Plan, module string) LayerPlan {
	t.Helper()
	for _, l := range p.Layers {
		if l.Module == module {
			return l
		}
	}
	t.Fatalf("no layer %s in plan", module)
	return LayerPlan{}
}

func TestPlanLlamaF32(t *testing.T) {
	p := mustPlan(t, llama(tiny).graph(), Options{Tool: "xpuinject test", Source: Source{Path: "/x"}})
	if p.Schema != SchemaVersion || p.Tool != "xpuinject test" || p.Arch != "llama" || p.Source.Path != "/x" ||
		!reflect.DeepEqual(p.Backends, []string{"cuda", "xpu"}) || len(p.Layers) != 11 {
		t.Fatalf("plan header %+v, %d layers", p, len(p.Layers))
	}

	emb := layerOf(t, p, "model.embed_tokens")
	if emb.Kernel != "keep" || emb.Reason != ReasonEmbedding || emb.Layer != "" {
		t.Errorf("embedding: %+v", emb)
	}
	wantOut(t, emb.Outputs, []TensorPlan{{Name: "model.embed_tokens.weight", Sources: []string{"model.embed_tokens.weight"},
		Transforms: []string{TCastBF16}, Shape: []int64{512, 64}, DType: "BF16", Layout: "row-major"}})

	in := layerOf(t, p, "model.layers.0.input_layernorm")
	if in.Kernel != "rmsnorm" || in.Layer != "RMSNorm" || in.Reason != "" || in.Eps != 1e-6 ||
		!reflect.DeepEqual(in.Transforms, []string{TCastBF16}) {
		t.Errorf("input_layernorm: %+v", in)
	}
	wantOut(t, in.Outputs, []TensorPlan{{Name: "model.layers.0.input_layernorm.weight",
		Sources: []string{"model.layers.0.input_layernorm.weight"}, Transforms: []string{TCastBF16},
		Shape: []int64{64}, DType: "BF16", Layout: "row-major"}})

	if want := []Binding{{Module: "model.layers.0.input_layernorm", Class: "LlamaRMSNorm", Layer: "RMSNorm",
		Reads: []string{"weight", "variance_epsilon"}}}; !reflect.DeepEqual(in.Bindings, want) {
		t.Errorf("input_layernorm bindings %+v", in.Bindings)
	}

	post := layerOf(t, p, "model.layers.1.post_attention_layernorm")
	if post.Kernel != "add-rmsnorm" || post.Layer != "RMSNorm" || post.Reason != ReasonAddRMSNorm {
		t.Errorf("post_attention_layernorm: %+v", post)
	}
	// the fused residual add lives in the decoder layer's forward: the plan binds it
	if want := []Binding{
		{Module: "model.layers.1.post_attention_layernorm", Class: "LlamaRMSNorm", Layer: "RMSNorm", Reads: []string{"weight", "variance_epsilon"}},
		{Module: "model.layers.1", Class: "LlamaDecoderLayer", Layer: "DecoderLayer",
			Reads: []string{"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}},
	}; !reflect.DeepEqual(post.Bindings, want) {
		t.Errorf("post_attention_layernorm bindings %+v", post.Bindings)
	}
	if fin := layerOf(t, p, "model.norm"); fin.Kernel != "rmsnorm" {
		t.Errorf("final norm kernel %s", fin.Kernel)
	}

	a := layerOf(t, p, "model.layers.0.self_attn")
	if a.Kernel != "attention-prefill" || a.Layer != "Attention" ||
		a.Reason != "prefill runs attention-prefill, generation attention-decode; RoPE by rope; q/k/v and o projections by gemm" ||
		!reflect.DeepEqual(a.Transforms, []string{TConcatQKV, TCastBF16, TPrepackKMajor}) {
		t.Errorf("attention: %+v", a)
	}
	pre := "model.layers.0.self_attn."
	wantOut(t, a.Outputs, []TensorPlan{
		{Name: pre + "qkv_proj.weight", Role: "weight", Attr: "xpuinject_qkv_weight",
			Sources:    []string{pre + "q_proj.weight", pre + "k_proj.weight", pre + "v_proj.weight"},
			Transforms: []string{TConcatQKV, TCastBF16, TPrepackKMajor}, Shape: []int64{64, 128}, DType: "BF16",
			Layout: "k-major", Split: []int64{64, 32, 32}},
		{Name: pre + "o_proj.weight", Attr: "xpuinject_o_weight", Sources: []string{pre + "o_proj.weight"},
			Transforms: []string{TCastBF16, TPrepackKMajor}, Shape: []int64{64, 64}, DType: "BF16", Layout: "k-major"},
	})
	if want := []Binding{{Module: "model.layers.0.self_attn", Class: "LlamaAttention", Layer: "Attention",
		Reads: []string{"config", "head_dim", "scaling", "layer_idx", "xpuinject_qkv_weight", "xpuinject_o_weight"}}}; !reflect.DeepEqual(a.Bindings, want) {
		t.Errorf("attention bindings %+v", a.Bindings)
	}

	m := layerOf(t, p, "model.layers.0.mlp")
	if m.Kernel != "gemm" || m.Layer != "SwiGLUMLP" ||
		!reflect.DeepEqual(m.Transforms, []string{TConcatGateUp, TCastBF16, TPrepackKMajor}) {
		t.Errorf("mlp: %+v", m)
	}
	mp := "model.layers.0.mlp."
	wantOut(t, m.Outputs, []TensorPlan{
		{Name: mp + "gate_up_proj.weight", Role: "weight", Attr: "xpuinject_gate_up_weight",
			Sources:    []string{mp + "gate_proj.weight", mp + "up_proj.weight"},
			Transforms: []string{TConcatGateUp, TCastBF16, TPrepackKMajor}, Shape: []int64{64, 320}, DType: "BF16",
			Layout: "k-major", Split: []int64{160, 160}},
		{Name: mp + "down_proj.weight", Attr: "xpuinject_down_weight", Sources: []string{mp + "down_proj.weight"},
			Transforms: []string{TCastBF16, TPrepackKMajor}, Shape: []int64{160, 64}, DType: "BF16", Layout: "k-major"},
	})

	h := layerOf(t, p, "lm_head")
	if h.Kernel != "gemm" || h.Layer != "LMHead" || h.Reason != ReasonLMHead || len(h.Outputs) != 1 ||
		h.Outputs[0].Name != "lm_head.weight" || h.Outputs[0].Attr != "" || h.Outputs[0].Layout != LayoutRowMajor {
		t.Errorf("lm_head: %+v", h)
	}
}

func wantOut(t *testing.T, got, want []TensorPlan) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outputs:\n got %+v\nwant %+v", got, want)
	}
}

func TestPlanBF16SourceIsNotCast(t *testing.T) {
	c := tiny
	c.dt = models.BF16
	c.bias = true
	p := mustPlan(t, llama(c).graph(), Options{})
	in := layerOf(t, p, "model.layers.0.input_layernorm")
	if len(in.Outputs[0].Transforms) != 0 || in.Transforms != nil || in.Outputs[0].DType != "BF16" {
		t.Errorf("bf16 norm weight got transforms %v", in.Outputs[0].Transforms)
	}
	a := layerOf(t, p, "model.layers.1.self_attn")
	pre := "model.layers.1.self_attn."
	wantOut(t, a.Outputs, []TensorPlan{
		{Name: pre + "qkv_proj.weight", Role: "weight", Attr: "xpuinject_qkv_weight",
			Sources:    []string{pre + "q_proj.weight", pre + "k_proj.weight", pre + "v_proj.weight"},
			Transforms: []string{TConcatQKV, TPrepackKMajor}, Shape: []int64{64, 128}, DType: "BF16",
			Layout: "k-major", Split: []int64{64, 32, 32}},
		{Name: pre + "qkv_proj.bias", Role: "bias", Attr: "xpuinject_qkv_bias",
			Sources:    []string{pre + "q_proj.bias", pre + "k_proj.bias", pre + "v_proj.bias"},
			Transforms: []string{TConcatQKV}, Shape: []int64{128}, DType: "BF16", Layout: "row-major", Split: []int64{64, 32, 32}},
		{Name: pre + "o_proj.weight", Attr: "xpuinject_o_weight", Sources: []string{pre + "o_proj.weight"},
			Transforms: []string{TPrepackKMajor}, Shape: []int64{64, 64}, DType: "BF16", Layout: "k-major"},
	})
	if e := layerOf(t, p, "model.embed_tokens"); len(e.Outputs[0].Transforms) != 0 || e.Outputs[0].DType != "BF16" {
		t.Errorf("bf16 embedding: %+v", e.Outputs)
	}
}

func TestPlanQwen3NormsAndOProjBias(t *testing.T) {
	c := tiny
	c.hd, c.qkNorm, c.blocks = 32, true, 1
	b := llama(c)
	// An o_proj bias too (no architecture here has one, but the rule covers it).
	b.layers[2].Tensors["o_proj.bias"] = b.t("model.layers.0.self_attn.o_proj.bias", models.F16, 64)
	p := mustPlan(t, b.graph(), Options{})
	a := layerOf(t, p, "model.layers.0.self_attn")
	pre := "model.layers.0.self_attn."
	if a.Kernel != "attention-prefill" || len(a.Outputs) != 5 {
		t.Fatalf("attention: %+v", a)
	}
	wantOut(t, a.Outputs[1:], []TensorPlan{
		{Name: pre + "o_proj.weight", Attr: "xpuinject_o_weight", Sources: []string{pre + "o_proj.weight"},
			Transforms: []string{TCastBF16, TPrepackKMajor}, Shape: []int64{64, 64}, DType: "BF16", Layout: "k-major"},
		{Name: pre + "o_proj.bias", Attr: "xpuinject_o_bias", Sources: []string{pre + "o_proj.bias"},
			Transforms: []string{TCastBF16}, Shape: []int64{64}, DType: "BF16", Layout: "row-major"},
		{Name: pre + "q_norm.weight", Sources: []string{pre + "q_norm.weight"},
			Transforms: []string{TCastBF16}, Shape: []int64{32}, DType: "BF16", Layout: "row-major"},
		{Name: pre + "k_norm.weight", Sources: []string{pre + "k_norm.weight"},
			Transforms: []string{TCastBF16}, Shape: []int64{32}, DType: "BF16", Layout: "row-major"},
	})
	if !reflect.DeepEqual(a.Outputs[0].Shape, []int64{64, 128}) || !reflect.DeepEqual(a.Outputs[0].Split, []int64{64, 32, 32}) {
		t.Errorf("qkv shape %v split %v", a.Outputs[0].Shape, a.Outputs[0].Split)
	}
	// the attention layer calls its q/k norms, which the plan binds to RMSNorm
	norm := []string{"weight", "variance_epsilon"}
	want := []Binding{
		{Module: "model.layers.0.self_attn", Class: "LlamaAttention", Layer: "Attention", Reads: []string{"config", "head_dim", "scaling",
			"layer_idx", "xpuinject_qkv_weight", "xpuinject_o_weight", "xpuinject_o_bias", "q_norm", "k_norm"}},
		{Module: pre + "q_norm", Class: "LlamaRMSNorm", Layer: "RMSNorm", Reads: norm},
		{Module: pre + "k_norm", Class: "LlamaRMSNorm", Layer: "RMSNorm", Reads: norm},
	}
	if !reflect.DeepEqual(a.Bindings, want) {
		t.Errorf("bindings %+v", a.Bindings)
	}
	// a graph that does not name the norms' class cannot be bound
	b.layers[2].Children = nil
	if _, err := New(b.graph(), nil, Options{}); !errors.Is(err, ErrCannotPlan) || !strings.Contains(err.Error(), "no class for its q_norm module") {
		t.Errorf("no child class: %v", err)
	}
}

func TestPlanTiedHead(t *testing.T) {
	c := tiny
	c.tied = true
	p := mustPlan(t, llama(c).graph(), Options{})
	h := layerOf(t, p, "lm_head")
	if h.Kernel != "gemm" || h.Layer != "LMHead" || h.Reason != ReasonLMHead+"; "+ReasonLMHeadTied || len(h.Outputs) != 0 ||
		h.Tensors["weight"] != "model.embed_tokens.weight" {
		t.Fatalf("tied head: %+v", h)
	}
}

// TestPlanKeepReasons covers every reason a replaceable layer is kept.
func TestPlanKeepReasons(t *testing.T) {
	cases := []struct {
		name   string
		cfg    func(*llamaCfg)
		edit   func(*gb)
		opts   Options
		module string
		reason string
	}{
		{name: "head_dim 48", cfg: func(c *llamaCfg) { c.hd = 48 }, module: "model.layers.0.self_attn",
			reason: "attention-prefill: head_dim 48 not supported (supported: {32, 64, 80, 96, 128, 256})"},
		{name: "head_dim 16", cfg: func(c *llamaCfg) { c.hd, c.heads, c.kv = 16, 4, 2 }, module: "model.layers.0.self_attn",
			reason: "attention-prefill: head_dim 16 not supported (supported: {32, 64, 80, 96, 128, 256})"},
		{name: "gqa", cfg: func(c *llamaCfg) { c.heads, c.kv = 3, 2 }, module: "model.layers.0.self_attn",
			reason: "attention-prefill: heads 3 not a multiple of kv_heads 2"},
		{name: "dtype F64", cfg: func(c *llamaCfg) { c.dt = models.F64 }, module: "model.layers.0.mlp",
			reason: "gemm: source dtype F64 of model.layers.0.mlp.down_proj.weight (down_proj.weight) not supported (supported: F32, F16, BF16)"},
		{name: "dtype F64 norm", cfg: func(c *llamaCfg) { c.dt = models.F64 }, module: "model.norm",
			reason: "rmsnorm: source dtype F64 of model.norm.weight (weight) not supported (supported: F32, F16, BF16)"},
		{name: "gemm too small", cfg: func(c *llamaCfg) { c.inter = 8 }, module: "model.layers.0.mlp",
			reason: "gemm: down_proj GEMM K=8, N=64: K and N must be >= 16"},
		{name: "disabled gemm keeps mlp", opts: Options{Disable: []string{"gemm"}}, module: "model.layers.0.mlp",
			reason: "kernel gemm disabled"},
		{name: "disabled gemm keeps attention", opts: Options{Disable: []string{"gemm"}}, module: "model.layers.0.self_attn",
			reason: "kernel gemm disabled (attention-prefill uses it)"},
		{name: "disabled decode keeps attention", opts: Options{Disable: []string{"attention-decode"}},
			module: "model.layers.0.self_attn", reason: "kernel attention-decode disabled (attention-prefill uses it)"},
		{name: "disabled rmsnorm", opts: Options{Disable: []string{"rmsnorm"}}, module: "model.layers.0.input_layernorm",
			reason: "kernel rmsnorm disabled"},
		{name: "mlp bias", edit: func(b *gb) {
			b.layers[4].Tensors["down_proj.bias"] = b.t("model.layers.0.mlp.down_proj.bias", models.F32, 64)
		}, module: "model.layers.0.mlp", reason: "MLP has tensors the SwiGLUMLP layer does not read (down_proj.bias); stock path"},
		{name: "partial qkv bias", edit: func(b *gb) {
			b.layers[2].Tensors["q_proj.bias"] = b.t("model.layers.0.self_attn.q_proj.bias", models.F32, 64)
		}, module: "model.layers.0.self_attn", reason: "only some of q/k/v carry a bias; concat-qkv needs all three or none; stock path"},
		{name: "xpu missing", opts: Options{Backends: []string{"cuda", "xpu"}}, module: "model.layers.0.mlp",
			reason: "kernel gemm has no xpu code"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := tiny
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			b := llama(cfg)
			if c.edit != nil {
				c.edit(b)
			}
			reg := kernels.Default()
			if c.name == "xpu missing" {
				reg = cudaOnlyGEMM(t)
			}
			p, err := New(b.graph(), reg, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			l := layerOf(t, p, c.module)
			if l.Kernel != KernelKeep || l.Layer != "" {
				t.Fatalf("kernel %q layer %q, want keep (reason %q)", l.Kernel, l.Layer, l.Reason)
			}
			if !strings.HasPrefix(l.Reason, c.reason) {
				t.Fatalf("reason %q\nwant prefix %q", l.Reason, c.reason)
			}
			// A kept layer writes its own tensors under their own names.
			if len(l.Outputs) == 0 {
				t.Fatal("kept layer has no outputs")
			}
			for _, o := range l.Outputs {
				if o.Attr != "" || len(o.Sources) != 1 || o.Sources[0] != o.Name || o.Layout != "row-major" {
					t.Errorf("kept output %+v", o)
				}
				src := b.ck.Tensors[o.Name]
				switch src.DType {
				case models.F32, models.F16:
					if o.DType != "BF16" || !reflect.DeepEqual(o.Transforms, []string{TCastBF16}) {
						t.Errorf("kept %s output %+v", src.DType, o)
					}
				default:
					if o.DType != string(src.DType) || len(o.Transforms) != 0 {
						t.Errorf("kept %s output %+v, want unchanged", src.DType, o)
					}
				}
				if !reflect.DeepEqual(o.Shape, src.Shape) {
					t.Errorf("kept output shape %v, source %v", o.Shape, src.Shape)
				}
			}
		})
	}
}

func cudaOnlyGEMM(t *testing.T) *kernels.Registry {
	t.Helper()
	var rows []*kernels.Kernel
	for _, k := range kernels.Default().Kernels() {
		kk := *k
		if kk.Name == "gemm" {
			kk.Backends = []string{"cuda"}
		}
		rows = append(rows, &kk)
	}
	r, err := kernels.New(rows...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPlanBackendSubset(t *testing.T) {
	p, err := New(llama(tiny).graph(), cudaOnlyGEMM(t), Options{Backends: []string{"cuda"}})
	if err != nil {
		t.Fatal(err)
	}
	if l := layerOf(t, p, "model.layers.0.mlp"); l.Kernel != "gemm" {
		t.Fatalf("cuda-only plan keeps mlp: %s", l.Reason)
	}
	if !reflect.DeepEqual(p.Backends, []string{"cuda"}) {
		t.Fatalf("backends %v", p.Backends)
	}
}

func TestPlanDisableAddRMSNormFallsBack(t *testing.T) {
	p := mustPlan(t, llama(tiny).graph(), Options{Disable: []string{"add-rmsnorm"}})
	l := layerOf(t, p, "model.layers.0.post_attention_layernorm")
	if l.Kernel != "rmsnorm" || l.Reason != "kernel add-rmsnorm disabled; so rmsnorm" || len(l.Bindings) != 1 {
		t.Fatalf("post norm: %q %q %v", l.Kernel, l.Reason, l.Bindings)
	}
	// The decoder layer is not patched then, so the MLP's down projection has no residual epilogue.
	if m := layerOf(t, p, "model.layers.0.mlp"); m.Kernel != "gemm" ||
		m.Reason != "gate/up by one GEMM with the swiglu epilogue, down by a plain GEMM" {
		t.Fatalf("mlp: %q %q", m.Kernel, m.Reason)
	}
}

func TestPlanMisalignedNote(t *testing.T) {
	c := tiny
	c.hidden, c.heads, c.kv, c.hd, c.inter, c.blocks = 70, 5, 5, 32, 123, 1 // hidden != heads*head_dim is allowed
	p := mustPlan(t, llama(c).graph(), Options{})
	m := layerOf(t, p, "model.layers.0.mlp")
	want := "gate/up by one GEMM with the swiglu epilogue, down by a GEMM with the decoder layer's residual add in its epilogue; gate_up_proj K=70 N=246, down_proj K=123 N=70: " +
		"bf16 rows not 16-byte aligned, the fallback (non-descriptor) GEMM path runs"
	if m.Kernel != "gemm" || m.Reason != want {
		t.Fatalf("mlp %s: %q", m.Kernel, m.Reason)
	}
	a := layerOf(t, p, "model.layers.0.self_attn")
	if a.Kernel != "attention-prefill" || !strings.Contains(a.Reason, "qkv_proj K=70 N=480, o_proj K=160 N=70: bf16 rows not 16-byte aligned") {
		t.Fatalf("attention %s: %q", a.Kernel, a.Reason)
	}
}

// levit builds a LeViT-like graph: a conv-bn embedding, an attention with its two
// linear-bn projections, and a bn-linear head; BatchNorms carry num_batches_tracked.
func levit(b *gb, headOut int64) {
	bn := func(m string, n int64, ts map[string]string) {
		ts["bn.weight"] = b.t(m+".batch_norm.weight", models.F32, n)
		ts["bn.bias"] = b.t(m+".batch_norm.bias", models.F32, n)
		ts["bn.running_mean"] = b.t(m+".batch_norm.running_mean", models.F32, n)
		ts["bn.running_var"] = b.t(m+".batch_norm.running_var", models.F32, n)
		ts["bn.num_batches_tracked"] = b.t(m+".batch_norm.num_batches_tracked", models.I64)
	}
	conv := map[string]string{"conv.weight": b.t("emb.convolution.weight", models.F32, 32, 3, 3, 3)}
	bn("emb", 32, conv)
	b.add(models.Layer{Module: "emb", Kind: models.KindConvBN, Class: "LevitConvEmbeddings", Block: -1, Eps: 1e-5,
		Tensors: conv, Dims: map[string]int64{"in": 3, "out": 32}})
	b.add(models.Layer{Module: "att", Kind: models.KindAttention, Class: "LevitAttention", Block: 0,
		Tensors: map[string]string{"attention_biases": b.t("att.attention_biases", models.F32, 2, 16)},
		Dims:    map[string]int64{"heads": 2, "hidden": 32}})
	qkv := map[string]string{"linear.weight": b.t("att.qkv.linear.weight", models.F32, 128, 32)}
	bn("att.qkv", 128, qkv)
	b.add(models.Layer{Module: "att.qkv", Kind: models.KindLinearBN, Class: "MLPLayerWithBN", Block: 0, Eps: 1e-5,
		Tensors: qkv, Dims: map[string]int64{"in": 32, "out": 128}})
	head := map[string]string{
		"linear.weight": b.t("cls.linear.weight", models.F32, headOut, 32),
		"linear.bias":   b.t("cls.linear.bias", models.F32, headOut),
	}
	bn("cls", 32, head)
	b.add(models.Layer{Module: "cls", Kind: models.KindBNLinear, Class: "LevitClassificationLayer", Block: -1, Eps: 1e-5,
		Bias: true, Tensors: head, Dims: map[string]int64{"in": 32, "out": headOut}})
}

func TestPlanLeViT(t *testing.T) {
	b := newGB("levit")
	levit(b, 16)
	p := mustPlan(t, b.graph(), Options{})
	bnSrc := func(m string) []string {
		return []string{m + ".batch_norm.weight", m + ".batch_norm.bias", m + ".batch_norm.running_mean", m + ".batch_norm.running_var"}
	}

	emb := layerOf(t, p, "emb")
	if emb.Kernel != "keep" || emb.Reason != ReasonConvBN || emb.Layer != "ConvBN" ||
		!reflect.DeepEqual(emb.Transforms, []string{TFoldConvBN, TCastBF16}) {
		t.Errorf("conv-bn: %+v", emb)
	}
	// kept (no Triton kernel) but bound: ConvBN runs stock conv2d on the folded tensors and
	// reads the convolution's geometry
	wantBind := []Binding{{Module: "emb", Class: "LevitConvEmbeddings", Layer: "ConvBN", Reads: []string{
		"convolution.stride", "convolution.padding", "convolution.dilation", "convolution.groups", "xpuinject_weight", "xpuinject_bias"}}}
	if !reflect.DeepEqual(emb.Bindings, wantBind) {
		t.Errorf("conv-bn bindings %+v", emb.Bindings)
	}
	wantOut(t, emb.Outputs, []TensorPlan{
		{Name: "emb.folded.weight", Role: "weight", Attr: "xpuinject_weight",
			Sources:    append([]string{"emb.convolution.weight"}, bnSrc("emb")...),
			Transforms: []string{TFoldConvBN, TCastBF16}, Shape: []int64{32, 3, 3, 3}, DType: "BF16", Layout: "row-major"},
		{Name: "emb.folded.bias", Role: "bias", Attr: "xpuinject_bias", Sources: bnSrc("emb"),
			Transforms: []string{TFoldConvBN, TCastBF16}, Shape: []int64{32}, DType: "BF16", Layout: "row-major"},
	})

	att := layerOf(t, p, "att")
	if att.Kernel != "keep" || att.Reason != ReasonLeViTAttention {
		t.Errorf("levit attention: %+v", att)
	}
	wantOut(t, att.Outputs, []TensorPlan{{Name: "att.attention_biases", Sources: []string{"att.attention_biases"},
		Transforms: []string{TCastBF16}, Shape: []int64{2, 16}, DType: "BF16", Layout: "row-major"}})

	q := layerOf(t, p, "att.qkv")
	if q.Kernel != "gemm" || q.Layer != "LinearBN" || q.Reason != "BatchNorm folded into the Linear; one GEMM with the bias epilogue" ||
		!reflect.DeepEqual(q.Transforms, []string{TFoldBN, TCastBF16, TPrepackKMajor}) {
		t.Errorf("linear-bn: %+v", q)
	}
	wantOut(t, q.Outputs, []TensorPlan{
		{Name: "att.qkv.folded.weight", Role: "weight", Attr: "xpuinject_weight",
			Sources:    append([]string{"att.qkv.linear.weight"}, bnSrc("att.qkv")...),
			Transforms: []string{TFoldBN, TCastBF16, TPrepackKMajor}, Shape: []int64{32, 128}, DType: "BF16", Layout: "k-major"},
		{Name: "att.qkv.folded.bias", Role: "bias", Attr: "xpuinject_bias", Sources: bnSrc("att.qkv"),
			Transforms: []string{TFoldBN, TCastBF16}, Shape: []int64{128}, DType: "BF16", Layout: "row-major"},
	})

	cls := layerOf(t, p, "cls")
	if cls.Kernel != "gemm" || cls.Layer != "BNLinear" || cls.Reason != "input BatchNorm folded into the Linear; one GEMM with the bias epilogue" {
		t.Errorf("bn-linear: %+v", cls)
	}
	wantOut(t, cls.Outputs, []TensorPlan{
		{Name: "cls.folded.weight", Role: "weight", Attr: "xpuinject_weight",
			Sources:    append([]string{"cls.linear.weight"}, bnSrc("cls")...),
			Transforms: []string{TFoldBNInput, TCastBF16, TPrepackKMajor}, Shape: []int64{32, 16}, DType: "BF16", Layout: "k-major"},
		{Name: "cls.folded.bias", Role: "bias", Attr: "xpuinject_bias",
			Sources:    append([]string{"cls.linear.weight", "cls.linear.bias"}, bnSrc("cls")...),
			Transforms: []string{TFoldBNInput, TCastBF16}, Shape: []int64{16}, DType: "BF16", Layout: "row-major"},
	})
	for _, l := range p.Layers {
		for _, o := range l.Outputs {
			if strings.HasSuffix(o.Name, "num_batches_tracked") {
				t.Errorf("num_batches_tracked written: %s", o.Name)
			}
		}
	}
}

func TestPlanLeViTSmallHeadKept(t *testing.T) {
	b := newGB("levit")
	levit(b, 10)
	p := mustPlan(t, b.graph(), Options{})
	cls := layerOf(t, p, "cls")
	if cls.Kernel != "keep" || cls.Reason != "gemm: linear GEMM K=32, N=10: K and N must be >= 16" {
		t.Fatalf("head: %s %q", cls.Kernel, cls.Reason)
	}
	// Kept: the BatchNorm and Linear tensors go out under their own names; the counter does not.
	var names []string
	for _, o := range cls.Outputs {
		names = append(names, o.Name)
	}
	want := []string{"cls.batch_norm.bias", "cls.batch_norm.running_mean", "cls.batch_norm.running_var", "cls.batch_norm.weight",
		"cls.linear.bias", "cls.linear.weight"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("kept head outputs %v", names)
	}
}

func TestPlanErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(*gb)
		opts Options
		want string
	}{
		{"orphan tensor", func(b *gb) { b.t("model.rotary.inv_freq", models.F32, 8) }, Options{},
			"inject: cannot plan: checkpoint tensors in no layer: model.rotary.inv_freq"},
		{"tensor in two layers", func(b *gb) { b.layers[1].Tensors["weight"] = "model.layers.0.post_attention_layernorm.weight" }, Options{},
			`tensor "model.layers.0.post_attention_layernorm.weight" belongs to both`},
		{"missing tensor", func(b *gb) { delete(b.ck.Tensors, "model.norm.weight") }, Options{},
			`layer model.norm: tensor "model.norm.weight" (weight) not in the checkpoint`},
		{"duplicate module", func(b *gb) {
			l := b.layers[1]
			l.Tensors = map[string]string{"weight": b.t("extra", models.F32, 64)}
			b.add(l)
		}, Options{}, "module model.layers.0.input_layernorm appears twice"},
		{"shape disagrees", func(b *gb) { b.t("model.layers.0.mlp.up_proj.weight", models.F32, 161, 64) }, Options{},
			`layer model.layers.0.mlp: tensor "model.layers.0.mlp.up_proj.weight" (up_proj.weight) has shape [161 64], the layer's dims want [160 64]`},
		{"missing role", func(b *gb) {
			delete(b.layers[2].Tensors, "o_proj.weight")
			delete(b.ck.Tensors, "model.layers.0.self_attn.o_proj.weight")
		},
			Options{}, "attention layer model.layers.0.self_attn has no o_proj.weight tensor"},
		{"duplicate output", func(b *gb) {
			b.add(models.Layer{Module: "x", Kind: models.KindLinear, Block: -1,
				Tensors: map[string]string{"weight": b.t("model.layers.0.self_attn.qkv_proj.weight", models.F32, 4, 4)}})
		}, Options{}, `output tensor "model.layers.0.self_attn.qkv_proj.weight" written by both model.layers.0.self_attn and x`},
		{"negative shape", func(b *gb) { b.t("model.norm.weight", models.F32, -64) }, Options{},
			`tensor "model.norm.weight" has shape [-64]`},
		{"nil header", func(b *gb) { b.ck.Tensors["stray"] = nil }, Options{},
			`checkpoint index has no header for tensor "stray"`},
		{"nil header in a layer", func(b *gb) { b.ck.Tensors["model.norm.weight"] = nil }, Options{},
			`layer model.norm: tensor "model.norm.weight" (weight) not in the checkpoint`},
		{"negative eps", func(b *gb) { b.layers[1].Eps = -1 }, Options{}, "layer model.layers.0.input_layernorm: eps -1"},
		{"unknown disable", nil, Options{Disable: []string{"flash"}}, `inject: cannot disable unknown kernel "flash"`},
		{"unknown backend", nil, Options{Backends: []string{"rocm"}}, `inject: unknown backend "rocm"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := llama(tiny)
			if c.edit != nil {
				c.edit(b)
			}
			_, err := New(b.graph(), nil, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if _, err := New(nil, nil, Options{}); !errors.Is(err, ErrCannotPlan) {
		t.Fatalf("nil graph: %v", err)
	}
}

func TestPlanOrphanNumBatchesTrackedAllowed(t *testing.T) {
	b := newGB("levit")
	levit(b, 16)
	b.t("stray.batch_norm.num_batches_tracked", models.I64)
	if _, err := New(b.graph(), nil, Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestPlanIsPure checks New leaves the graph untouched and shares no maps with it.
func TestPlanIsPure(t *testing.T) {
	b := llama(tiny)
	g := b.graph()
	before := fmt.Sprintf("%#v", g.Layers)
	p := mustPlan(t, g, Options{})
	if after := fmt.Sprintf("%#v", g.Layers); after != before {
		t.Fatal("New changed the graph")
	}
	p.Layers[1].Tensors["weight"] = "changed"
	p.Layers[1].Dims["hidden"] = 1
	if g.Layers[1].Tensors["weight"] == "changed" || g.Layers[1].Dims["hidden"] == 1 {
		t.Fatal("plan shares maps with the graph")
	}
	again := mustPlan(t, llama(tiny).graph(), Options{})
	p2 := mustPlan(t, llama(tiny).graph(), Options{})
	if !reflect.DeepEqual(again, p2) {
		t.Fatal("two plans of the same graph differ")
	}
}

func TestPlanSlidingWindowNote(t *testing.T) {
	for _, c := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"sliding_window": 4096.0}, "; sliding window 4096: in the 4-D mask transformers passes, and decode over a static cache skips keys older than it"},
		{map[string]any{"sliding_window": 4096.0, "use_sliding_window": false}, ""},
		{map[string]any{"sliding_window": nil}, ""},
		{nil, ""},
	} {
		b := llama(tiny)
		b.ck.Config = c.cfg
		p := mustPlan(t, b.graph(), Options{})
		a := layerOf(t, p, "model.layers.0.self_attn")
		want := "prefill runs attention-prefill, generation attention-decode; RoPE by rope; q/k/v and o projections by gemm" + c.want
		if a.Reason != want {
			t.Errorf("config %v: reason %q, want %q", c.cfg, a.Reason, want)
		}
	}
}

// The plan's dtype: every output cast to it (a source already in it copied), recorded at the
// top; auto follows the checkpoint (F16 -> fp16, BF16 and F32 -> bf16); a kernel without
// code for the dtype is not used.
func TestPlanDType(t *testing.T) {
	for _, c := range []struct {
		src          models.DType
		want, dtype  string
		outDT, cast  string
		normTransfos []string
	}{
		{models.F32, "", DTypeBF16, "BF16", TCastBF16, []string{TCastBF16}},
		{models.F32, DTypeAuto, DTypeBF16, "BF16", TCastBF16, []string{TCastBF16}},
		{models.F32, DTypeFP16, DTypeFP16, "F16", TCastFP16, []string{TCastFP16}},
		{models.F16, DTypeAuto, DTypeFP16, "F16", TCastFP16, nil},
		{models.F16, DTypeBF16, DTypeBF16, "BF16", TCastBF16, []string{TCastBF16}},
		{models.BF16, DTypeAuto, DTypeBF16, "BF16", TCastBF16, nil},
		{models.BF16, DTypeFP16, DTypeFP16, "F16", TCastFP16, []string{TCastFP16}},
	} {
		name := fmt.Sprintf("%s->%s", c.src, c.want)
		cfg := tiny
		cfg.dt = c.src
		p, err := New(llama(cfg).graph(), nil, Options{DType: c.want})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.DType != c.dtype {
			t.Errorf("%s: plan dtype %q, want %q", name, p.DType, c.dtype)
		}
		for _, l := range p.Layers {
			for _, o := range l.Outputs {
				if o.DType != c.outDT {
					t.Errorf("%s: %s is %s, want %s", name, o.Name, o.DType, c.outDT)
				}
				for _, tr := range o.Transforms {
					if (tr == TCastBF16 || tr == TCastFP16) && tr != c.cast {
						t.Errorf("%s: %s transform %s, want %s", name, o.Name, tr, c.cast)
					}
				}
			}
		}
		if n := layerOf(t, p, "model.norm"); !slices.Equal(n.Outputs[0].Transforms, c.normTransfos) {
			t.Errorf("%s: norm transforms %v, want %v", name, n.Outputs[0].Transforms, c.normTransfos)
		}
	}
	// mostly F32 with a few F16 tensors is an F32 checkpoint: bf16
	b := llama(tiny)
	b.layers[0].Tensors["weight"] = b.t("model.embed_tokens.weight", models.F16, tiny.vocab, tiny.hidden)
	if p := mustPlan(t, b.graph(), Options{DType: DTypeAuto}); p.DType != DTypeBF16 {
		t.Errorf("mostly-F32 checkpoint: auto gave %s", p.DType)
	}
	if _, err := New(llama(tiny).graph(), nil, Options{DType: "fp8"}); err == nil || !strings.Contains(err.Error(), `dtype "fp8": want auto, bf16 or fp16`) {
		t.Errorf("bad dtype: %v", err)
	}
	// a kernel that computes in bf16 only keeps its layers in an fp16 plan
	var rows []*kernels.Kernel
	for _, k := range kernels.Default().Kernels() {
		kk := *k
		if kk.Name == "rmsnorm" {
			kk.ActDTypes = []string{"bf16"}
		}
		rows = append(rows, &kk)
	}
	reg, err := kernels.New(rows...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(llama(tiny).graph(), reg, Options{DType: DTypeFP16})
	if err != nil {
		t.Fatal(err)
	}
	if l := layerOf(t, p, "model.norm"); l.Kernel != KernelKeep || l.Reason != "kernel rmsnorm does not compute in fp16" {
		t.Errorf("bf16-only rmsnorm in an fp16 plan: %s (%s)", l.Kernel, l.Reason)
	}
}
