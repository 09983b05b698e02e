// Package kernels holds the Go side of xpuinject's Triton kernels: the registry that says
// which kernel replaces which layer kind, on which backends, with which dtypes, and under
// which shape constraints. The kernels themselves are Python (xpuinject_kernels/).
//
// The registry is data: one Kernel row per kernel. Adding a kernel is one Python module,
// one row in Default and its tests.
package kernels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/models"
)

// Backends a kernel package can target (kernel-hub variant folders build/torch-<backend>).
const (
	BackendCUDA = "cuda"
	BackendXPU  = "xpu"
)

// GEMM epilogues the gemm kernel fuses.
const (
	EpilogueNone   = "none"
	EpilogueBias   = "bias"
	EpilogueSwiGLU = "swiglu" // silu(gate) * up over a concatenated [gate | up] output
	EpilogueGeGLU  = "geglu"  // gelu_tanh(gate) * up over a concatenated [gate | up] output (Gemma 2, 3)
	// EpilogueGeGLUErf is geglu with the exact, erf-based gelu (Gemma 1's hidden_act "gelu").
	EpilogueGeGLUErf  = "geglu_erf"
	EpilogueHardswish = "hardswish"
	EpilogueResidual  = "residual"
)

// GeGLUEpilogue is the gate/up GEMM's epilogue for an mlp-geglu layer: the exact gelu's where
// the layer names it, else the tanh form's.
func GeGLUEpilogue(l models.Layer) string {
	if l.Activation == models.ActGeLUExact {
		return EpilogueGeGLUErf
	}
	return EpilogueGeGLU
}

// AttentionHeadDims are the head_dim values the attention kernels accept (contract.json,
// which attention.py reads too). 16 is not there yet, so models with head_dim 16 keep the
// stock attention.
var AttentionHeadDims = slices.Clone(contract.AttentionHeadDims)

// MinGEMMDim is the smallest K and N the planner gives the gemm kernel (contract.json):
// tl.dot's smallest tile edge is 16, so a narrower operand is mostly padding and the
// vendor GEMM is the better path there (gemm.py itself accepts any K, N >= 1).
var MinGEMMDim = contract.MinGEMMDim

// descriptorAlign is the byte alignment tensor descriptors need for strides: a bf16 row
// of K elements is K*2 bytes (DESIGN: misaligned descriptor strides gave silently wrong
// results on the H200, so kernels check and fall back).
const descriptorAlign = 16

// Kernel is one registry row.
type Kernel struct {
	// Name is the registry name ("gemm"); plans record it.
	Name string `json:"name"`
	// Module is the Python module in xpuinject_kernels/ that implements it ("gemm").
	Module string `json:"module"`
	// Replaces are the layer kinds the kernel can stand in for.
	Replaces []models.LayerKind `json:"replaces"`
	// Layer is the kernel-hub layer class that replaces a module's forward ("RMSNorm").
	Layer string `json:"layer,omitempty"`
	// Layers overrides Layer per replaced kind (gemm: SwiGLUMLP, LinearBN, ...).
	Layers map[models.LayerKind]string `json:"layers,omitempty"`
	// Variants are further layer classes the planner binds for the replaced kinds, by the
	// block's form: a checkpoint's fused projections (Phi-3), a shared expert, a router child.
	Variants []string `json:"variants,omitempty"`
	// Function is the function the kernel stands in for or its layer calls, e.g. the
	// transformers attention function "attention_forward".
	Function string `json:"function,omitempty"`
	// Epilogues the kernel fuses (gemm only).
	Epilogues []string `json:"epilogues,omitempty"`
	// Uses are other kernels a replacement with this one also runs (attention runs rope,
	// the decode kernel and gemm for its projections); Accepts checks them too.
	Uses []string `json:"uses,omitempty"`
	// Backends the kernel has code for.
	Backends []string `json:"backends"`
	// ActDTypes are the activation dtypes the kernel computes in.
	ActDTypes []string `json:"act_dtypes"`
	// WeightDTypes are the source checkpoint dtypes the planner may convert from.
	WeightDTypes []models.DType `json:"weight_dtypes"`
	// Constraints must all hold for a layer to be replaced.
	Constraints []Constraint `json:"constraints,omitempty"`
	// Notes are checked too but never reject: they say which code path will run.
	Notes []Note `json:"notes,omitempty"`
}

// VendorRoute is a Route of the registry's GPU that matched a layer: Op runs on the vendor
// path for calls of MinTokens..MaxTokens tokens (0: open on that side), because of Reason.
type VendorRoute struct {
	Op                   string
	MinTokens, MaxTokens int64
	Reason               string
}

// Constraint is a checkable condition on a layer.
type Constraint struct {
	// Text is the condition in words, as `xpuinject kernels` prints it.
	Text string `json:"text"`
	// Check returns nil when the subject satisfies the condition, else an error that
	// says which value broke it.
	Check func(s *Subject) error `json:"-"`
}

// Note is a non-rejecting check: Check returns "" or a remark for the plan's reason.
type Note struct {
	Text  string                  `json:"text"`
	Check func(s *Subject) string `json:"-"`
}

// GEMM is one matrix product a layer runs when replaced: x[M, K] @ W[K, N].
type GEMM struct {
	Name     string // "qkv_proj", "gate_up_proj", ...
	K, N     int64
	Epilogue string
}

// Subject is what constraints look at: a layer, the dtypes of its source tensors and
// the GEMMs its replacement runs.
type Subject struct {
	Layer  models.Layer
	DTypes map[string]models.DType // role -> dtype
	GEMMs  []GEMM
}

// NewSubject derives a Subject from a layer and the checkpoint's tensor index.
// It fails when a tensor the layer names is not in tensors.
func NewSubject(l models.Layer, tensors map[string]*models.Tensor) (*Subject, error) {
	s := &Subject{Layer: l, DTypes: make(map[string]models.DType, len(l.Tensors)), GEMMs: LayerGEMMs(l)}
	for _, role := range slices.Sorted(maps.Keys(l.Tensors)) {
		name := l.Tensors[role]
		if TrainingOnly(name) {
			continue
		}
		t, ok := tensors[name]
		if !ok || t == nil {
			return nil, fmt.Errorf("kernels: layer %s: tensor %q (%s) not in the checkpoint", l.Module, name, role)
		}
		s.DTypes[role] = t.DType
	}
	return s, nil
}

// TrainingOnly reports whether a checkpoint tensor is state only training reads:
// BatchNorm's num_batches_tracked counter (an I64 scalar). Inference never uses it, so
// it constrains no kernel and is not written to packed checkpoints.
func TrainingOnly(name string) bool {
	return name == "num_batches_tracked" || strings.HasSuffix(name, ".num_batches_tracked")
}

// LayerGEMMs lists the GEMMs a replaced layer runs, from its Dims (nil for kinds that
// run none). Missing dims read as 0 and fail the size constraint with a clear message.
func LayerGEMMs(l models.Layer) []GEMM {
	d := l.Dims
	switch l.Kind {
	case models.KindAttention:
		_, split := l.Tensors["q_proj.weight"]
		_, fused := l.Tensors["qkv_proj.weight"]
		if !split && !fused {
			return nil
		}
		ep := EpilogueNone
		if l.Bias {
			ep = EpilogueBias
		}
		h, kv, hd := d["heads"], d["kv_heads"], d["head_dim"]
		return []GEMM{
			{Name: "qkv_proj", K: d["hidden"], N: (h + 2*kv) * hd, Epilogue: ep},
			{Name: "o_proj", K: h * hd, N: d["hidden"], Epilogue: ep},
		}
	case models.KindMLPSwiGLU, models.KindMLPGeGLU:
		ep := EpilogueSwiGLU
		if l.Kind == models.KindMLPGeGLU {
			ep = GeGLUEpilogue(l)
		}
		return []GEMM{
			{Name: "gate_up_proj", K: d["hidden"], N: 2 * d["intermediate"], Epilogue: ep},
			{Name: "down_proj", K: d["intermediate"], N: d["hidden"], Epilogue: EpilogueNone},
		}
	case models.KindMoE: // per expert hit
		return []GEMM{
			{Name: "gate_up_proj", K: d["hidden"], N: 2 * d["intermediate"], Epilogue: EpilogueSwiGLU},
			{Name: "down_proj", K: d["intermediate"], N: d["hidden"], Epilogue: EpilogueNone},
		}
	case models.KindLinearBN, models.KindBNLinear:
		return []GEMM{{Name: "linear", K: d["in"], N: d["out"], Epilogue: EpilogueBias}}
	case models.KindLMHead:
		return []GEMM{{Name: "lm_head", K: d["hidden"], N: d["vocab"], Epilogue: EpilogueNone}}
	case models.KindLinear:
		ep := EpilogueNone
		if l.Bias {
			ep = EpilogueBias
		}
		return []GEMM{{Name: "linear", K: d["in"], N: d["out"], Epilogue: ep}}
	}
	return nil
}

// Registry is the set of kernels, in a stable order, and the measured data of the GPU a
// plan targets (its vendor routes and kept notes).
type Registry struct {
	kernels []*Kernel
	gpu     *GPU
}

// New builds a registry from rows, with no GPU data; names must be unique and every Uses
// must name a row.
func New(rows ...*Kernel) (*Registry, error) {
	r := &Registry{gpu: &GPU{}}
	seen := map[string]bool{}
	for _, k := range rows {
		if k == nil || k.Name == "" {
			return nil, fmt.Errorf("kernels: registry row without a name")
		}
		if seen[k.Name] {
			return nil, fmt.Errorf("kernels: kernel %q registered twice", k.Name)
		}
		seen[k.Name] = true
		r.kernels = append(r.kernels, k)
	}
	for _, k := range r.kernels {
		for _, u := range k.Uses {
			if !seen[u] {
				return nil, fmt.Errorf("kernels: kernel %q uses unknown kernel %q", k.Name, u)
			}
		}
	}
	return r, nil
}

var (
	allBackends  = []string{BackendCUDA, BackendXPU}
	actDTypes    = []string{"bf16", "fp16"}
	weightDTypes = []models.DType{models.F32, models.F16, models.BF16}
)

// WithGPU is r with the measured data of g (LoadGPU) instead of its own.
func (r *Registry) WithGPU(g *GPU) *Registry {
	return &Registry{kernels: r.kernels, gpu: g}
}

// GPU is the GPU data the registry plans with (no routes when it has none).
func (r *Registry) GPU() *GPU { return r.gpu }

// ForGPU is the registry of the kernels in xpuinject_kernels/ with the data of the GPU
// named ("" is DefaultGPU; one without data has no routes).
func ForGPU(name string) (*Registry, error) {
	g, err := LoadGPU(name)
	if err != nil {
		return nil, err
	}
	return defaultRegistry.WithGPU(g), nil
}

// Default is ForGPU(DefaultGPU()): the kernels and the routes measured on the default GPU.
func Default() *Registry {
	r, err := ForGPU("")
	if err != nil {
		panic(err) // embedded data, checked by gpus_test.go
	}
	return r
}

// defaultRows are the kernels in xpuinject_kernels/ (DESIGN "Kernels"): one row a kernel.
func defaultRows() []*Kernel {
	return []*Kernel{
		&Kernel{
			// Gemma's norm (x/rms(x) · (1 + w), fp32, one rounding) is the same kernel with an
			// fp32 weight holding 1 + w, folded offline, and no rounding before the multiply;
			// OLMo 2's (w · x/rms(x), fp32, one rounding) is it on the module's own weight.
			Name: "rmsnorm", Module: "rmsnorm", Replaces: []models.LayerKind{models.KindRMSNorm, models.KindRMSNormGemma, models.KindRMSNormFP32},
			Layer: "RMSNorm", Layers: map[models.LayerKind]string{models.KindRMSNormGemma: "GemmaRMSNorm", models.KindRMSNormFP32: "FP32RMSNorm"},
			Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{hiddenPositive},
		},
		&Kernel{
			// Helium's norm in Llama's block (one rounding after the weight) is Gemma's kernel on
			// the module's own weight, as rmsnorm runs it.
			Name: "add-rmsnorm", Module: "rmsnorm",
			Replaces: []models.LayerKind{models.KindRMSNorm, models.KindRMSNormGemma, models.KindRMSNormFP32},
			Layer:    "RMSNorm", Layers: map[models.LayerKind]string{models.KindRMSNormGemma: "GemmaRMSNorm", models.KindRMSNormFP32: "FP32RMSNorm"},
			Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{hiddenPositive},
		},
		&Kernel{
			// A block that normalizes a branch before adding it to the residual (OLMo 2's and EXAONE
			// 4's norms, GLM-4's post-MLP one): the norm and that add in one pass, each rounded as stock
			// rounds them.
			Name: "rmsnorm-add", Module: "rmsnorm", Replaces: []models.LayerKind{models.KindRMSNorm, models.KindRMSNormFP32},
			Layer: "RMSNorm", Layers: map[models.LayerKind]string{models.KindRMSNormFP32: "FP32RMSNorm"},
			Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{hiddenPositive},
		},
		&Kernel{
			// RoPE has no module of its own: it runs inside the Attention layer, on q and k
			// in place (transformers names the function "rotary_pos_emb").
			Name: "rope", Module: "rope", Replaces: []models.LayerKind{models.KindAttention},
			Function: "rotary_pos_emb", Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{headDimEven},
		},
		&Kernel{
			Name: "gemm", Module: "gemm",
			Replaces: []models.LayerKind{models.KindMLPSwiGLU, models.KindMLPGeGLU, models.KindLinearBN, models.KindBNLinear,
				models.KindLinear, models.KindLMHead},
			Layers: map[models.LayerKind]string{
				models.KindMLPSwiGLU: "SwiGLUMLP", models.KindMLPGeGLU: "GeGLUMLP", models.KindLinearBN: "LinearBN",
				models.KindBNLinear: "BNLinear", models.KindLinear: "Linear", models.KindLMHead: "LMHead",
			},
			Variants:  []string{"FusedSwiGLUMLP"},
			Epilogues: slices.Clone(contract.GEMMEpilogues),
			Backends:  allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{gemmMinDims},
			Notes:       []Note{gemmAlignment},
		},
		&Kernel{
			Name: "attention-prefill", Module: "attention", Replaces: []models.LayerKind{models.KindAttention},
			Layer: "Attention", Variants: []string{"FusedAttention"}, Function: "attention_forward",
			Uses:     []string{"attention-decode", "rope", "gemm"},
			Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{attentionProjections, attentionHeadDim, attentionGQA},
		},
		&Kernel{
			Name: "attention-decode", Module: "attention", Replaces: []models.LayerKind{models.KindAttention},
			Layer: "Attention", Variants: []string{"FusedAttention"}, Function: "attention_forward",
			Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{attentionProjections, attentionHeadDim, attentionGQA},
		},
		&Kernel{
			// The whole sparse MoE block: routing, the experts' gate/up with the swiglu epilogue
			// and down with the routing weight, over only the experts hit (moe.py).
			Name: "moe", Module: "moe", Replaces: []models.LayerKind{models.KindMoE}, Layer: "SparseMoE",
			Variants: []string{"SharedExpertMoE", "RouterMoE"},
			Backends: allBackends, ActDTypes: actDTypes, WeightDTypes: weightDTypes,
			Constraints: []Constraint{gemmMinDims},
		},
	}
}

var defaultRegistry = mustNew(defaultRows()...)

func mustNew(rows ...*Kernel) *Registry {
	r, err := New(rows...)
	if err != nil {
		panic(err) // the rows are constants of this file; registry_test builds them
	}
	return r
}

func defaultNames() []string {
	var out []string
	for _, k := range defaultRows() {
		out = append(out, k.Name)
	}
	return out
}

// LayerClasses are every kernel-hub layer class the kernel's replacements bind: each replaced
// kind's, then the variants.
func (k *Kernel) LayerClasses() []string {
	var out []string
	for _, kind := range k.Replaces {
		if c := k.LayerClass(kind); c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, c := range k.Variants {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// DecoderLayers are the kernel-hub decoder-layer classes: one forward over a decoder layer's
// replaced children, with each norm's add and the residual adds in the launches around them.
// None runs a kernel of its own. ConvBN, the one other layer class, keeps the stock conv on
// weights folded offline. The planner binds a block the first of them that replaces its class
// (contract.json), so the more specific come first.
var DecoderLayers = []string{"MoEDecoderLayer", "ScaledMoEDecoderLayer", "GemmaDecoderLayer", "PostNormDecoderLayer",
	"PostNormMoEDecoderLayer", "SandwichDecoderLayer", "DecoderLayer"}

// LayerClass is the kernel-hub layer class the kernel uses for a layer kind.
func (k *Kernel) LayerClass(kind models.LayerKind) string {
	if c, ok := k.Layers[kind]; ok {
		return c
	}
	return k.Layer
}

// Kernels returns the rows in registry order.
func (r *Registry) Kernels() []*Kernel { return slices.Clone(r.kernels) }

// ByName returns a kernel by registry name.
func (r *Registry) ByName(name string) (*Kernel, bool) {
	for _, k := range r.kernels {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// Names lists the kernel names in registry order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.kernels))
	for i, k := range r.kernels {
		out[i] = k.Name
	}
	return out
}

// For returns the kernels that replace a layer kind, in registry order.
func (r *Registry) For(kind models.LayerKind) []*Kernel {
	var out []*Kernel
	for _, k := range r.kernels {
		if slices.Contains(k.Replaces, kind) {
			out = append(out, k)
		}
	}
	return out
}

// Accepts reports whether kernel can replace layer l, whose source tensors are described
// by tensors (the checkpoint's index: name -> tensor). When it cannot, reason says why;
// when it can, reason carries any note (e.g. which code path runs) or is "".
// Kernels in the kernel's Uses are checked too, except for the layer kinds they replace.
func (r *Registry) Accepts(kernel string, l models.Layer, tensors map[string]*models.Tensor) (ok bool, reason string) {
	k, found := r.ByName(kernel)
	if !found {
		return false, fmt.Sprintf("unknown kernel %q (known: %s)", kernel, strings.Join(r.Names(), ", "))
	}
	if !slices.Contains(k.Replaces, l.Kind) {
		return false, fmt.Sprintf("%s does not replace %s layers", k.Name, l.Kind)
	}
	s, err := NewSubject(l, tensors)
	if err != nil {
		return false, strings.TrimPrefix(err.Error(), "kernels: ")
	}
	var notes []string
	for _, kk := range r.closure(k) {
		if ok, why := r.check(kk, s, &notes); !ok {
			if kk != k {
				why = kk.Name + " (used by " + k.Name + "): " + why
			}
			return false, why
		}
	}
	return true, strings.Join(notes, "; ")
}

// VendorOps evaluates the GPU's routes of kernel and the kernels it uses for layer l, in
// registry order, each with the reason "vendor path faster for <when> (<vendor>; <measured>;
// <file>)". Nil when none match.
func (r *Registry) VendorOps(kernel string, l models.Layer, tensors map[string]*models.Tensor) []VendorRoute {
	k, found := r.ByName(kernel)
	if !found {
		return nil
	}
	s, err := NewSubject(l, tensors)
	if err != nil {
		return nil
	}
	var out []VendorRoute
	for _, kk := range r.closure(k) {
		for _, rt := range r.gpu.Routes {
			lo, hi := rt.TokenBounds()
			if rt.Kernel != kk.Name || rt.KeepLayer || !rt.Match(s) || slices.ContainsFunc(out, func(v VendorRoute) bool {
				return v.Op == rt.Op && v.MinTokens == lo && v.MaxTokens == hi
			}) {
				continue
			}
			out = append(out, VendorRoute{Op: rt.Op, MinTokens: lo, MaxTokens: hi, Reason: rt.Reason(r.gpu.File)})
		}
	}
	return out
}

// closure is k followed by the kernels it uses, transitively, each once.
func (r *Registry) closure(k *Kernel) []*Kernel {
	out := []*Kernel{k}
	for i := 0; i < len(out); i++ {
		for _, u := range out[i].Uses {
			kk, _ := r.ByName(u)
			if kk != nil && !slices.Contains(out, kk) {
				out = append(out, kk)
			}
		}
	}
	return out
}

// Closure returns the names of kernel and every kernel it uses, transitively
// (nil for an unknown name).
func (r *Registry) Closure(kernel string) []string {
	k, ok := r.ByName(kernel)
	if !ok {
		return nil
	}
	var out []string
	for _, kk := range r.closure(k) {
		out = append(out, kk.Name)
	}
	return out
}

func (r *Registry) check(k *Kernel, s *Subject, notes *[]string) (bool, string) {
	for _, role := range slices.Sorted(maps.Keys(s.DTypes)) {
		if dt := s.DTypes[role]; !slices.Contains(k.WeightDTypes, dt) {
			return false, fmt.Sprintf("source dtype %s of %s (%s) not supported (supported: %s)",
				dt, s.Layer.Tensors[role], role, joinDTypes(k.WeightDTypes))
		}
	}
	for _, c := range k.Constraints {
		if err := c.Check(s); err != nil {
			return false, err.Error()
		}
	}
	for _, rt := range r.gpu.Routes {
		if rt.KeepLayer && rt.Kernel == k.Name && rt.Match(s) {
			return false, rt.Reason(r.gpu.File)
		}
	}
	add := func(msg string) {
		if msg != "" && !slices.Contains(*notes, msg) {
			*notes = append(*notes, msg)
		}
	}
	for _, n := range k.Notes {
		add(n.Check(s))
	}
	for _, kept := range r.gpu.Kept {
		if kept.Kernel == k.Name && kept.Match(s) {
			add(kept.Note(r.gpu.File))
		}
	}
	return true, ""
}

// The constraints of Default.
var (
	hiddenPositive = Constraint{
		Text: "hidden >= 1",
		Check: func(s *Subject) error {
			if h := s.Layer.Dims["hidden"]; h < 1 {
				return fmt.Errorf("hidden size %d < 1", h)
			}
			return nil
		},
	}
	headDimEven = Constraint{
		Text: "head_dim even (rotate-half pairs)",
		Check: func(s *Subject) error {
			if d := s.Layer.Dims["head_dim"]; d < 2 || d%2 != 0 {
				return fmt.Errorf("head_dim %d is not even", d)
			}
			return nil
		},
	}
	gemmMinDims = Constraint{
		Text: fmt.Sprintf("K >= %d and N >= %d", MinGEMMDim, MinGEMMDim),
		Check: func(s *Subject) error {
			if len(s.GEMMs) == 0 {
				return fmt.Errorf("no GEMM shape known for a %s layer", s.Layer.Kind)
			}
			for _, g := range s.GEMMs {
				if g.K < MinGEMMDim || g.N < MinGEMMDim {
					return fmt.Errorf("%s GEMM K=%d, N=%d: K and N must be >= %d", g.Name, g.K, g.N, MinGEMMDim)
				}
			}
			return nil
		},
	}
	gemmAlignment = Note{
		Text: fmt.Sprintf("tensor-descriptor path when K*2 and N*2 bytes are multiples of %d; fallback path otherwise", descriptorAlign),
		Check: func(s *Subject) string {
			var odd []string
			for _, g := range s.GEMMs {
				if (g.K*2)%descriptorAlign != 0 || (g.N*2)%descriptorAlign != 0 {
					odd = append(odd, fmt.Sprintf("%s K=%d N=%d", g.Name, g.K, g.N))
				}
			}
			if len(odd) == 0 {
				return ""
			}
			return fmt.Sprintf("%s: bf16 rows not %d-byte aligned, the fallback (non-descriptor) GEMM path runs",
				strings.Join(odd, ", "), descriptorAlign)
		},
	}
	attentionProjections = Constraint{
		Text: "q/k/v/o projections, or a fused qkv_proj and o_proj (Phi-3)",
		Check: func(s *Subject) error {
			var missing []string
			roles := []string{"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"}
			if _, ok := s.Layer.Tensors["qkv_proj.weight"]; ok {
				roles = []string{"qkv_proj.weight", "o_proj.weight"}
			}
			for _, role := range roles {
				if _, ok := s.Layer.Tensors[role]; !ok {
					missing = append(missing, role)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("no %s tensors (roles: %s)", strings.Join(missing, ", "),
					strings.Join(slices.Sorted(maps.Keys(s.Layer.Tensors)), ", "))
			}
			return nil
		},
	}
	attentionHeadDim = Constraint{
		Text: "head_dim in " + formatSet(AttentionHeadDims),
		Check: func(s *Subject) error {
			if d := s.Layer.Dims["head_dim"]; !slices.Contains(AttentionHeadDims, d) {
				return fmt.Errorf("head_dim %d not supported (supported: %s)", d, formatSet(AttentionHeadDims))
			}
			return nil
		},
	}
	attentionGQA = Constraint{
		Text: "heads % kv_heads == 0",
		Check: func(s *Subject) error {
			h, kv := s.Layer.Dims["heads"], s.Layer.Dims["kv_heads"]
			if h < 1 || kv < 1 || h%kv != 0 {
				return fmt.Errorf("heads %d not a multiple of kv_heads %d", h, kv)
			}
			return nil
		},
	}
)

func formatSet(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return "{" + strings.Join(s, ", ") + "}"
}

func joinDTypes(v []models.DType) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}
