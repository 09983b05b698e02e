package kernels

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/models"
)

func tensorsOf(dt models.DType, shapes map[string][]int64) map[string]*models.Tensor {
	out := map[string]*models.Tensor{}
	for n, s := range shapes {
		out[n] = &models.Tensor{Name: n, DType: dt, Shape: s}
	}
	return out
}

// attn builds a Llama-style attention layer and its tensors.
func attn(hidden, heads, kv, hd int64, dt models.DType) (models.Layer, map[string]*models.Tensor) {
	l := models.Layer{
		Module: "model.layers.0.self_attn", Kind: models.KindAttention, Class: "LlamaAttention",
		Tensors: map[string]string{
			"q_proj.weight": "q", "k_proj.weight": "k", "v_proj.weight": "v", "o_proj.weight": "o",
		},
		Dims: map[string]int64{"hidden": hidden, "heads": heads, "kv_heads": kv, "head_dim": hd},
	}
	return l, tensorsOf(dt, map[string][]int64{
		"q": {heads * hd, hidden}, "k": {kv * hd, hidden}, "v": {kv * hd, hidden}, "o": {hidden, heads * hd},
	})
}

func mlp(hidden, inter int64, dt models.DType) (models.Layer, map[string]*models.Tensor) {
	l := models.Layer{
		Module: "model.layers.0.mlp", Kind: models.KindMLPSwiGLU, Class: "LlamaMLP",
		Tensors: map[string]string{"gate_proj.weight": "g", "up_proj.weight": "u", "down_proj.weight": "d"},
		Dims:    map[string]int64{"hidden": hidden, "intermediate": inter},
	}
	return l, tensorsOf(dt, map[string][]int64{"g": {inter, hidden}, "u": {inter, hidden}, "d": {hidden, inter}})
}

func TestDefaultRegistryRows(t *testing.T) {
	r := Default()
	want := []string{"rmsnorm", "add-rmsnorm", "rmsnorm-add", "rope", "gemm", "attention-prefill", "attention-decode", "moe"}
	if got := strings.Join(r.Names(), ","); got != strings.Join(want, ",") {
		t.Fatalf("names = %s, want %s", got, strings.Join(want, ","))
	}
	modules := map[string]string{"rmsnorm": "rmsnorm", "add-rmsnorm": "rmsnorm", "rmsnorm-add": "rmsnorm", "rope": "rope", "gemm": "gemm",
		"attention-prefill": "attention", "attention-decode": "attention", "moe": "moe"}
	for _, k := range r.Kernels() {
		if k.Module != modules[k.Name] {
			t.Errorf("%s: module %q, want %q", k.Name, k.Module, modules[k.Name])
		}
		if strings.Join(k.Backends, ",") != "cuda,xpu" {
			t.Errorf("%s: backends %v", k.Name, k.Backends)
		}
		for _, c := range k.Constraints {
			if c.Text == "" || c.Check == nil {
				t.Errorf("%s: constraint without text or check", k.Name)
			}
		}
	}
	g, _ := r.ByName("gemm")
	if strings.Join(g.Epilogues, ",") != "none,bias,swiglu,geglu,geglu_erf,hardswish,residual" {
		t.Errorf("gemm epilogues %v", g.Epilogues)
	}
	for kind, class := range map[models.LayerKind]string{models.KindMLPSwiGLU: "SwiGLUMLP", models.KindMLPGeGLU: "GeGLUMLP",
		models.KindLinearBN: "LinearBN", models.KindBNLinear: "BNLinear", models.KindLinear: "Linear"} {
		if got := g.LayerClass(kind); got != class {
			t.Errorf("gemm layer class for %s = %q, want %q", kind, got, class)
		}
	}
	a, _ := r.ByName("attention-prefill")
	if a.Layer != "Attention" || a.Function != "attention_forward" {
		t.Errorf("attention-prefill layer %q function %q", a.Layer, a.Function)
	}
	if got := strings.Join(r.Closure("attention-prefill"), ","); got != "attention-prefill,attention-decode,rope,gemm" {
		t.Errorf("closure = %s", got)
	}
	if r.Closure("nope") != nil {
		t.Error("closure of unknown kernel not nil")
	}
	if _, ok := r.ByName("nope"); ok {
		t.Error("ByName found a kernel that does not exist")
	}
	var forRMS []string
	for _, k := range r.For(models.KindRMSNorm) {
		forRMS = append(forRMS, k.Name)
	}
	if strings.Join(forRMS, ",") != "rmsnorm,add-rmsnorm,rmsnorm-add" {
		t.Errorf("For(rmsnorm) = %v", forRMS)
	}
	if len(r.For(models.KindEmbedding)) != 0 || len(r.For(models.KindConvBN)) != 0 {
		t.Error("a kernel claims to replace embeddings or conv-bn")
	}
}

func TestNewRejectsBadRows(t *testing.T) {
	if _, err := New(&Kernel{Name: "a"}, &Kernel{Name: "a"}); err == nil || !strings.Contains(err.Error(), `"a" registered twice`) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := New(&Kernel{Name: "a", Uses: []string{"b"}}); err == nil || !strings.Contains(err.Error(), `unknown kernel "b"`) {
		t.Errorf("unknown use: %v", err)
	}
	if _, err := New(&Kernel{}); err == nil {
		t.Error("nameless row accepted")
	}
}

// The measured routes of Default (gpus/h200.json) per Llama shape: which ops each layer
// hands to the vendor.
func TestDefaultVendorOps(t *testing.T) {
	r := Default()
	// op[<=max][>=min] per route, sorted: the bounds are part of what the plan carries
	keys := func(routes []VendorRoute) string {
		var out []string
		for _, v := range routes {
			s := v.Op
			if v.MaxTokens > 0 {
				s += fmt.Sprintf("<=%d", v.MaxTokens)
			}
			if v.MinTokens > 0 {
				s += fmt.Sprintf(">=%d", v.MinTokens)
			}
			if !strings.HasPrefix(v.Reason, "vendor path faster for ") || !strings.HasSuffix(v.Reason, "; gpus/h200.json)") {
				t.Errorf("route %s: reason %q", s, v.Reason)
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name                     string
		hidden, h, kv, hd, inter int64
		attn, mlp                string
	}{
		{"llama-3.2-1b", 2048, 32, 8, 64, 8192, "attention-prefill,o_proj,qkv_proj", "down_proj<=64>=17"},
		{"llama-3.1-8b", 4096, 32, 8, 128, 14336, "attention-prefill,o_proj<=64>=17,qkv_proj<=64>=17", "down_proj<=64>=17"},
		{"head_dim 32", 1024, 32, 8, 32, 4096, "", ""},
		// gate_up K=2048 N=3072 is Llama-3.2-1B's qkv_proj shape: routes match by GEMM name too
		{"names differ", 2048, 16, 16, 32, 1536, "", ""},
	} {
		l, ts := attn(c.hidden, c.h, c.kv, c.hd, models.BF16)
		if got := keys(r.VendorOps("attention-prefill", l, ts)); got != c.attn {
			t.Errorf("%s attention: %q, want %q", c.name, got, c.attn)
		}
		l, ts = mlp(c.hidden, c.inter, models.BF16)
		if got := keys(r.VendorOps("gemm", l, ts)); got != c.mlp {
			t.Errorf("%s mlp: %q, want %q", c.name, got, c.mlp)
		}
	}
	// attention routes never reach a layer of another kind, whatever its dims say
	l, ts := mlp(2048, 8192, models.BF16)
	l.Dims["head_dim"] = 64
	for _, rt := range r.GPU().Routes {
		if rt.HeadDims != nil && rt.Match(&Subject{Layer: l, GEMMs: LayerGEMMs(l)}) {
			t.Errorf("%s route %s matches an MLP", rt.Kernel, rt.Op)
		}
	}
	if r.VendorOps("nope", l, ts) != nil {
		t.Error("unknown kernel has routes")
	}
	// a GPU without data: no routes at all
	none, err := ForGPU("no-such-gpu")
	if err != nil {
		t.Fatal(err)
	}
	l, ts = mlp(2048, 8192, models.BF16)
	if none.GPU().File != "" || none.VendorOps("gemm", l, ts) != nil {
		t.Errorf("GPU without data: file %q, routes %v", none.GPU().File, none.VendorOps("gemm", l, ts))
	}
	if ok, reason := none.Accepts("gemm", l, ts); !ok || reason != "" {
		t.Errorf("GPU without data: accepts %v %q (want no kept note)", ok, reason)
	}
}

// Every route's match data: a GEMM route matches its name, K and N and nothing else, an
// attention route exactly its head dims; bounds and words follow the token class.
func TestVendorRouteFields(t *testing.T) {
	for _, rt := range Default().GPU().Routes {
		switch {
		case rt.GEMM != "":
			if rt.Kernel != "gemm" || rt.K < MinGEMMDim || rt.N < MinGEMMDim || rt.Op != rt.GEMM {
				t.Errorf("GEMM route %+v", rt)
			}
			if !rt.Match(&Subject{GEMMs: []GEMM{{Name: rt.GEMM, K: rt.K, N: rt.N}}}) ||
				rt.Match(&Subject{GEMMs: []GEMM{{Name: rt.GEMM, K: rt.K, N: rt.N + 1}}}) ||
				rt.Match(&Subject{GEMMs: []GEMM{{Name: rt.GEMM + "x", K: rt.K, N: rt.N}}}) {
				t.Errorf("%s: Match disagrees with name, K, N", rt.Op)
			}
		default:
			if rt.Op != rt.Kernel || rt.Tokens != "" {
				t.Errorf("attention route %+v", rt)
			}
			for _, hd := range AttentionHeadDims {
				l, _ := attn(2048, 32, 8, hd, models.BF16)
				if got, want := rt.Match(&Subject{Layer: l}), slices.Contains(rt.HeadDims, hd); got != want {
					t.Errorf("%s: head_dim %d: Match %v, HeadDims %v", rt.Op, hd, got, rt.HeadDims)
				}
			}
		}
	}
	for _, c := range []struct {
		rt     Route
		lo, hi int64
		when   string
	}{
		{Route{GEMM: "down_proj", K: 8192, N: 2048, Tokens: TokensPrefill}, 65, 0, "down_proj K=8192 N=2048 at prefill (M > 64)"},
		{Route{GEMM: "down_proj", K: 8192, N: 2048, Tokens: TokensShort}, 17, 64, "down_proj K=8192 N=2048 at short prefill (16 < M <= 64)"},
		{Route{GEMM: "down_proj", K: 8192, N: 2048, Tokens: TokensDecode}, 0, 16, "down_proj K=8192 N=2048 at decode (M <= 16)"},
		{Route{GEMM: "o_proj", K: 16, N: 32}, 0, 0, "o_proj K=16 N=32"},
		{Route{Op: "attention-decode", HeadDims: []int64{32, 64, 128}}, 0, 0, "decode (one query token per sequence) at head_dim 32, 64 and 128"},
		{Route{Op: "attention-prefill", HeadDims: []int64{64}}, 0, 0, "causal prefill at head_dim 64"},
	} {
		lo, hi := c.rt.TokenBounds()
		if lo != c.lo || hi != c.hi || c.rt.When() != c.when {
			t.Errorf("%+v: bounds %d..%d when %q, want %d..%d %q", c.rt, lo, hi, c.rt.When(), c.lo, c.hi, c.when)
		}
	}
	rt := Route{Kernel: "gemm", Op: "o_proj", GEMM: "o_proj", K: 2048, N: 2048, Vendor: "cuBLAS",
		Measured: []Measurement{{"M=1", 0.884}, {"M=2048", 0.9145}}}
	if got, want := rt.Reason("gpus/x.json"), "vendor path faster for o_proj K=2048 N=2048 (cuBLAS; our speed 0.88x at M=1, 0.91x at M=2048; gpus/x.json)"; got != want {
		t.Errorf("reason %q\nwant   %q", got, want)
	}
}

func TestAccepts(t *testing.T) {
	r := Default()
	type tc struct {
		name   string
		kernel string
		layer  func() (models.Layer, map[string]*models.Tensor)
		ok     bool
		reason string // substring (exact "" when empty and ok)
	}
	cases := []tc{
		{"llama attention", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) {
			return attn(2048, 32, 8, 64, models.BF16)
		}, true, ""},
		{"head_dim 32", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) { return attn(128, 4, 2, 32, models.F32) }, true, ""},
		{"head_dim 16", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) { return attn(64, 4, 2, 16, models.F32) },
			false, "head_dim 16 not supported (supported: {32, 64, 80, 96, 128, 256})"},
		{"head_dim 48", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) { return attn(192, 4, 2, 48, models.F32) },
			false, "head_dim 48 not supported (supported: {32, 64, 80, 96, 128, 256})"},
		{"head_dim 80 odd heads aligned", "attention-decode", func() (models.Layer, map[string]*models.Tensor) {
			return attn(400, 5, 5, 80, models.F16)
		}, true, ""},
		{"gqa mismatch", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) { return attn(192, 6, 4, 32, models.F32) },
			false, "heads 6 not a multiple of kv_heads 4"},
		{"dtype F64", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) { return attn(128, 4, 2, 32, models.F64) },
			false, "source dtype F64 of k (k_proj.weight) not supported (supported: F32, F16, BF16)"},
		{"gemm via attention: hidden 8", "attention-prefill", func() (models.Layer, map[string]*models.Tensor) {
			return attn(8, 1, 1, 32, models.F32)
		}, false, "gemm (used by attention-prefill): qkv_proj GEMM K=8, N=96: K and N must be >= 16"},
		{"wrong kind", "rmsnorm", func() (models.Layer, map[string]*models.Tensor) { return attn(64, 4, 2, 16, models.F32) },
			false, "rmsnorm does not replace attention layers"},
		{"unknown kernel", "flash", func() (models.Layer, map[string]*models.Tensor) { return attn(64, 4, 2, 16, models.F32) },
			false, `unknown kernel "flash" (known: rmsnorm, add-rmsnorm, rmsnorm-add, rope, gemm, attention-prefill, attention-decode, moe)`},
		{"mlp aligned", "gemm", func() (models.Layer, map[string]*models.Tensor) { return mlp(4096, 14336, models.BF16) }, true, ""},
		{"mlp kept below its target says why", "gemm", func() (models.Layer, map[string]*models.Tensor) { return mlp(2048, 8192, models.BF16) },
			true, "gate_up_proj K=2048 N=16384 stays on our kernel: the stock MLP or cuBLAS + silu*mul is slower " +
				"(our speed 1.16x at M=1, 1.28x at M=8, 1.32x at M=64, 1.05x at M=2048, 1.08x at M=16384) though the 0.95x cuBLAS mm alone " +
				"target is missed (0.82x at M=2048, 0.89x at M=16384; gpus/h200.json)"},
		{"mlp misaligned notes fallback", "gemm", func() (models.Layer, map[string]*models.Tensor) { return mlp(70, 123, models.F32) },
			true, "gate_up_proj K=70 N=246, down_proj K=123 N=70: bf16 rows not 16-byte aligned, the fallback (non-descriptor) GEMM path runs"},
		{"mlp too small", "gemm", func() (models.Layer, map[string]*models.Tensor) { return mlp(8, 64, models.F32) },
			false, "gate_up_proj GEMM K=8, N=128: K and N must be >= 16"},
		{"missing tensor", "gemm", func() (models.Layer, map[string]*models.Tensor) {
			l, ts := mlp(64, 128, models.F32)
			delete(ts, "u")
			return l, ts
		}, false, `layer model.layers.0.mlp: tensor "u" (up_proj.weight) not in the checkpoint`},
		{"rmsnorm", "rmsnorm", func() (models.Layer, map[string]*models.Tensor) {
			return models.Layer{Module: "n", Kind: models.KindRMSNorm, Tensors: map[string]string{"weight": "w"},
				Dims: map[string]int64{"hidden": 70}}, tensorsOf(models.F16, map[string][]int64{"w": {70}})
		}, true, ""},
		{"rmsnorm hidden 0", "add-rmsnorm", func() (models.Layer, map[string]*models.Tensor) {
			return models.Layer{Module: "n", Kind: models.KindRMSNorm, Tensors: map[string]string{"weight": "w"}},
				tensorsOf(models.F16, map[string][]int64{"w": {0}})
		}, false, "hidden size 0 < 1"},
		{"linear-bn with num_batches_tracked", "gemm", func() (models.Layer, map[string]*models.Tensor) {
			l := models.Layer{Module: "x", Kind: models.KindLinearBN, Dims: map[string]int64{"in": 32, "out": 64},
				Tensors: map[string]string{"linear.weight": "x.linear.weight", "bn.weight": "x.bn.weight",
					"bn.num_batches_tracked": "x.bn.num_batches_tracked"}}
			ts := tensorsOf(models.F32, map[string][]int64{"x.linear.weight": {64, 32}, "x.bn.weight": {64}})
			ts["x.bn.num_batches_tracked"] = &models.Tensor{Name: "x.bn.num_batches_tracked", DType: models.I64}
			return l, ts
		}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, ts := c.layer()
			ok, reason := r.Accepts(c.kernel, l, ts)
			if ok != c.ok {
				t.Fatalf("ok = %v (%q), want %v", ok, reason, c.ok)
			}
			if c.reason == "" && reason != "" {
				t.Fatalf("reason = %q, want none", reason)
			}
			if c.reason != "" && reason != c.reason {
				t.Fatalf("reason = %q, want %q", reason, c.reason)
			}
		})
	}
}

// A keep_layer route keeps the whole layer on the stock path, with the route's reason.
func TestKeepLayerRoute(t *testing.T) {
	g := &GPU{Name: "x", File: "gpus/x.json", Routes: []Route{{
		Kernel: "gemm", Op: "gate_up_proj", GEMM: "gate_up_proj", K: 2048, N: 16384, KeepLayer: true, Vendor: "cuBLAS",
		Measured: []Measurement{{"M=16384", 0.91}},
	}}}
	r := defaultRegistry.WithGPU(g)
	l, ts := mlp(2048, 8192, models.BF16)
	ok, reason := r.Accepts("gemm", l, ts)
	if want := "vendor path faster for gate_up_proj K=2048 N=16384 (cuBLAS; our speed 0.91x at M=16384; gpus/x.json)"; ok || reason != want {
		t.Fatalf("ok=%v reason=%q, want %q", ok, reason, want)
	}
	if r.VendorOps("gemm", l, ts) != nil {
		t.Error("a keep_layer route also routed an operation")
	}
	l, ts = mlp(1024, 4096, models.BF16)
	if ok, reason := r.Accepts("gemm", l, ts); !ok {
		t.Fatalf("other shape rejected: %s", reason)
	}
}

func TestLayerGEMMs(t *testing.T) {
	l, _ := attn(160, 5, 5, 32, models.F16)
	l.Bias = true
	g := LayerGEMMs(l)
	if len(g) != 2 || g[0] != (GEMM{"qkv_proj", 160, 480, EpilogueBias}) || g[1] != (GEMM{"o_proj", 160, 160, EpilogueBias}) {
		t.Fatalf("attention GEMMs %+v", g)
	}
	lb := models.Layer{Kind: models.KindBNLinear, Dims: map[string]int64{"in": 64, "out": 10}}
	if g := LayerGEMMs(lb); len(g) != 1 || g[0] != (GEMM{"linear", 64, 10, EpilogueBias}) {
		t.Fatalf("bn-linear GEMMs %+v", g)
	}
	if LayerGEMMs(models.Layer{Kind: models.KindEmbedding}) != nil {
		t.Fatal("embedding has GEMMs")
	}
	if LayerGEMMs(models.Layer{Kind: models.KindAttention, Tensors: map[string]string{"attention_biases": "b"}}) != nil {
		t.Fatal("LeViT attention has GEMMs")
	}
}

func TestTrainingOnly(t *testing.T) {
	for name, want := range map[string]bool{
		"a.batch_norm.num_batches_tracked": true, "num_batches_tracked": true,
		"a.batch_norm.running_var": false, "a.xnum_batches_tracked": false,
	} {
		if TrainingOnly(name) != want {
			t.Errorf("TrainingOnly(%q) = %v", name, !want)
		}
	}
}

func mustKernel(t *testing.T, r *Registry, name string) *Kernel {
	t.Helper()
	k, ok := r.ByName(name)
	if !ok {
		t.Fatalf("no kernel %s", name)
	}
	return k
}

// TestRegistryAgreesWithPython checks the registry against the Python package it describes:
// every kernel module is embedded, and every layer class the registry names, the head dims,
// the epilogues and the decode bound are contract.json's (which the Python side reads; its
// tests check the Python values against the same file).
func TestRegistryAgreesWithPython(t *testing.T) {
	b, err := fs.ReadFile(Sources, SourceDir+"/"+ContractFile)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		DecodeMaxTokens   int64                      `json:"decode_max_tokens"`
		ShortMaxTokens    int64                      `json:"short_max_tokens"`
		MinGEMMDim        int64                      `json:"min_gemm_dim"`
		AttentionHeadDims []int64                    `json:"attention_head_dims"`
		GEMMEpilogues     []string                   `json:"gemm_epilogues"`
		Layers            map[string]json.RawMessage `json:"layers"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	r := Default()
	for _, k := range r.Kernels() {
		if _, err := fs.Stat(Sources, SourceDir+"/"+k.Module+".py"); err != nil {
			t.Errorf("%s: module %s.py not embedded: %v", k.Name, k.Module, err)
		}
		for _, c := range k.LayerClasses() {
			if raw.Layers[c] == nil {
				t.Errorf("%s: layer class %s is not in %s", k.Name, c, ContractFile)
			}
		}
	}
	// Every layer class the package defines is listed by `xpuinject kernels`: a kernel's, a
	// decoder layer's, or ConvBN (folded weights, the stock conv).
	listed := map[string]bool{"ConvBN": true}
	for _, k := range r.Kernels() {
		for _, c := range k.LayerClasses() {
			listed[c] = true
		}
	}
	for _, c := range DecoderLayers {
		if raw.Layers[c] == nil {
			t.Errorf("decoder layer class %s is not in %s", c, ContractFile)
		}
		listed[c] = true
	}
	for c := range raw.Layers {
		if !listed[c] {
			t.Errorf("layer class %s of %s is in no registry row and not in DecoderLayers", c, ContractFile)
		}
	}
	if !slices.Equal(AttentionHeadDims, raw.AttentionHeadDims) {
		t.Errorf("registry head dims %v, %s %v", AttentionHeadDims, ContractFile, raw.AttentionHeadDims)
	}
	if g := mustKernel(t, r, "gemm"); !slices.Equal(g.Epilogues, raw.GEMMEpilogues) {
		t.Errorf("gemm epilogues %v, %s %v", g.Epilogues, ContractFile, raw.GEMMEpilogues)
	}
	for _, e := range []string{EpilogueNone, EpilogueBias, EpilogueSwiGLU, EpilogueHardswish, EpilogueResidual} {
		if !slices.Contains(raw.GEMMEpilogues, e) {
			t.Errorf("epilogue %q is not in %s", e, ContractFile)
		}
	}
	if ShortMaxM != raw.ShortMaxTokens {
		t.Errorf("ShortMaxM %d, %s %d", ShortMaxM, ContractFile, raw.ShortMaxTokens)
	}
	if DecodeMaxM != raw.DecodeMaxTokens || MinGEMMDim != raw.MinGEMMDim {
		t.Errorf("DecodeMaxM %d / MinGEMMDim %d, %s %d / %d", DecodeMaxM, MinGEMMDim, ContractFile, raw.DecodeMaxTokens, raw.MinGEMMDim)
	}
}
