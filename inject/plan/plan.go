package plan

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// Options configure New.
type Options struct {
	// Source says where the checkpoint came from (recorded in the plan).
	Source Source
	// Tool is "xpuinject <version>".
	Tool string
	// Backends the package targets; default cuda and xpu. A kernel is used only when it
	// has code for every one of them.
	Backends []string
	// Disable names registry kernels not to use (`--disable`); layers they would have
	// replaced are kept, and so are layers whose kernel uses a disabled one.
	Disable []string
	// DType is "bf16", "fp16" or "auto" ("" is DefaultDType); auto is fp16 when most of the
	// checkpoint's floating-point elements are F16, else bf16 (a BF16 or an F32 checkpoint).
	DType string
}

// DefaultBackends are the backends a plan targets when Options.Backends is empty.
var DefaultBackends = []string{kernels.BackendCUDA, kernels.BackendXPU}

// ErrCannotPlan marks a graph the planner cannot plan: it is inconsistent (a tensor in no
// layer or in two, a shape that disagrees with the layer's dims, a duplicate output).
var ErrCannotPlan = errors.New("inject: cannot plan")

// Keep reasons that do not depend on the layer (PLAN.md lists every reason).
const (
	ReasonEmbedding = "a gather; nothing to gain"
	// bf16 logits round to 0.125 at |logit| 16-32, so candidates closer than that tie and argmax
	// takes the lower token id; the fp32 accumulator keeps their order.
	ReasonLMHead = "fp32 logits: the GEMM writes its fp32 accumulator, so near-equal logits keep their " +
		"order instead of tying in 16 bits (greedy decoding then follows the fp32 model further)"
	ReasonLMHeadTied = "reads the embedding table it is tied to (no tensor of its own)"
	// A kernel of ours pays through what it fuses; a bare GEMM has nothing to fuse.
	ReasonLinear = "plain GEMM (bias at most): nothing to fuse, so the vendor GEMM (cuBLAS) runs it"
	ReasonConvBN = "no conv kernel; BatchNorm folded into the convolution, stock conv2d runs " +
		"(in the plan's dtype, like the rest of the injected model)"
	ReasonLeViTAttention = "learned per-head attention biases over short non-causal sequences: " +
		"the causal GQA kernels do not apply; stock path (its Linear+BatchNorm layers are planned on their own)"
	ReasonAddRMSNorm = "fused with the residual add before it; the decoder layer is patched"
	// ReasonRMSNormAdd is a norm whose output the block adds to the residual (OLMo 2's).
	ReasonRMSNormAdd = "fused with the residual add after it (the norm rounded, then the sum); the decoder layer is patched"
	// ReasonScaledResidual is a Granite block's post-attention norm (%g: residual_multiplier).
	ReasonScaledResidual = "the decoder layer is patched: the block scales each branch by residual_multiplier %g " +
		"before adding it, and both adds run in the o_proj and down_proj GEMMs' residual epilogues (one fp32 " +
		"multiply-add, rounded once); this norm runs on its own"
	// ReasonScaledResidualMoE is the same norm in a GraniteMoE block (%g: residual_multiplier).
	ReasonScaledResidualMoE = "the decoder layer is patched: the block scales each branch by residual_multiplier %g " +
		"before adding it; the attention's add runs in the o_proj GEMM's residual epilogue (one fp32 multiply-add, " +
		"rounded once), the MoE block's output is scaled and added as the stock block does; this norm runs on its own"
	ReasonGemmaNorm = "Gemma's (1 + w) folded offline and kept fp32; normalized and scaled in fp32, rounded once"
	// ReasonFP32Norm is OLMo 2's order: the weight multiplies the unrounded normalized row.
	ReasonFP32Norm = "normalized and scaled in fp32, rounded once (the weight multiplies the unrounded row)"
	// Gemma's embedding multiplies by √hidden in its forward; the table itself is unscaled.
	ReasonScaledEmbedding = "a gather (its forward scales by √hidden; the table, which a tied head reads, is unscaled); nothing to gain"
)

// New decides, for every layer of g, the kernel that replaces it or keep with the
// reason, the weight transforms, and the tensors pack writes (PLAN.md). It does no I/O.
// reg nil means kernels.Default().
func New(g *models.Graph, reg *kernels.Registry, opts Options) (*Plan, error) {
	if g == nil || g.Checkpoint == nil {
		return nil, fmt.Errorf("%w: no graph or checkpoint", ErrCannotPlan)
	}
	if reg == nil {
		reg = kernels.Default()
	}
	backends := opts.Backends
	if len(backends) == 0 {
		backends = DefaultBackends
	}
	for _, b := range backends {
		if !slices.Contains(DefaultBackends, b) {
			return nil, fmt.Errorf("inject: unknown backend %q (known: %s)", b, strings.Join(DefaultBackends, ", "))
		}
	}
	disabled := map[string]bool{}
	for _, d := range opts.Disable {
		if _, ok := reg.ByName(d); !ok {
			return nil, fmt.Errorf("inject: cannot disable unknown kernel %q (known: %s)", d, strings.Join(reg.Names(), ", "))
		}
		disabled[d] = true
	}
	if err := checkOwnership(g); err != nil {
		return nil, err
	}
	dtype, err := chooseDType(opts.DType, g.Checkpoint)
	if err != nil {
		return nil, err
	}
	p := &planner{g: g, reg: reg, backends: backends, disabled: disabled, tensors: g.Checkpoint.Tensors, dtype: dtype}
	plan := &Plan{
		Schema:   SchemaVersion,
		Tool:     opts.Tool,
		Source:   opts.Source,
		Arch:     g.Arch,
		Backends: slices.Clone(backends),
		DType:    dtype,
		GPU:      reg.GPU().Name,
		Disable:  slices.Sorted(maps.Keys(disabled)),
		Layers:   make([]LayerPlan, 0, len(g.Layers)),
	}
	if len(plan.Disable) == 0 {
		plan.Disable = nil
	}
	writer := map[string]string{} // output name -> module
	for _, l := range g.Layers {
		lp, err := p.layer(l)
		if err != nil {
			return nil, err
		}
		for _, o := range lp.Outputs {
			if m, dup := writer[o.Name]; dup {
				return nil, fmt.Errorf("%w: output tensor %q written by both %s and %s", ErrCannotPlan, o.Name, m, l.Module)
			}
			writer[o.Name] = l.Module
		}
		plan.Layers = append(plan.Layers, lp)
	}
	return plan, nil
}

// checkOwnership enforces: every tensor a layer names exists; every checkpoint tensor is
// named by exactly one layer. Exceptions: a tied lm-head names the embedding's table
// (and owns nothing), and BatchNorm's num_batches_tracked may sit outside every layer
// (training state; never written to the packed checkpoint).
func checkOwnership(g *models.Graph) error {
	owner := map[string]string{}
	viewed := map[string]bool{} // stacked tensors whose views a layer owns
	modules := map[string]bool{}
	for _, l := range g.Layers {
		if l.Module == "" {
			return fmt.Errorf("%w: a %s layer has no module path", ErrCannotPlan, l.Kind)
		}
		if modules[l.Module] {
			return fmt.Errorf("%w: module %s appears twice in the graph", ErrCannotPlan, l.Module)
		}
		modules[l.Module] = true
		for _, role := range slices.Sorted(maps.Keys(l.Tensors)) {
			name := l.Tensors[role]
			if t, ok := g.Checkpoint.Tensors[name]; !ok || t == nil {
				return fmt.Errorf("%w: layer %s: tensor %q (%s) not in the checkpoint", ErrCannotPlan, l.Module, name, role)
			}
			if l.Kind == models.KindLMHead && l.Tied {
				continue
			}
			if m, dup := owner[name]; dup {
				return fmt.Errorf("%w: tensor %q belongs to both %s and %s", ErrCannotPlan, name, m, l.Module)
			}
			owner[name] = l.Module
			if of := g.Checkpoint.Tensors[name].Of; of != "" {
				viewed[of] = true
			}
		}
	}
	var orphans []string
	for _, name := range slices.Sorted(maps.Keys(g.Checkpoint.Tensors)) {
		t := g.Checkpoint.Tensors[name]
		if t == nil {
			return fmt.Errorf("%w: checkpoint index has no header for tensor %q", ErrCannotPlan, name)
		}
		if slices.ContainsFunc(t.Shape, func(d int64) bool { return d < 0 }) {
			return fmt.Errorf("%w: tensor %q has shape %v", ErrCannotPlan, name, t.Shape)
		}
		if _, ok := owner[name]; !ok && !viewed[name] && !kernels.TrainingOnly(name) {
			orphans = append(orphans, name)
		}
	}
	if len(orphans) > 0 {
		more := ""
		if len(orphans) > 5 {
			more = fmt.Sprintf(" and %d more", len(orphans)-5)
			orphans = orphans[:5]
		}
		return fmt.Errorf("%w: checkpoint tensors in no layer: %s%s", ErrCannotPlan, strings.Join(orphans, ", "), more)
	}
	return nil
}

type planner struct {
	g        *models.Graph
	reg      *kernels.Registry
	backends []string
	disabled map[string]bool
	tensors  map[string]*models.Tensor
	dtype    string // DTypeBF16 or DTypeFP16
}

// chooseDType resolves Options.DType: auto keeps the checkpoint's 16-bit type (F16 -> fp16,
// BF16 -> bf16) and takes bf16 for an F32 one, counting the elements of each dtype.
func chooseDType(want string, ck *models.Checkpoint) (string, error) {
	switch want {
	case "":
		return DefaultDType, nil
	case DTypeBF16, DTypeFP16:
		return want, nil
	case DTypeAuto:
	default:
		return "", fmt.Errorf("inject: dtype %q: want auto, bf16 or fp16", want)
	}
	var f16, other int64
	for _, t := range ck.Tensors {
		if t.Of != "" { // a view's elements are its parent's
			continue
		}
		n := int64(1)
		for _, d := range t.Shape {
			n *= max(d, 1)
		}
		switch t.DType {
		case models.F16:
			f16 += n
		case models.BF16, models.F32:
			other += n
		}
	}
	if f16 > other {
		return DTypeFP16, nil
	}
	return DTypeBF16, nil
}

// target is the safetensors dtype and cast transform of the plan's dtype.
func (p *planner) target() (models.DType, string) {
	if p.dtype == DTypeFP16 {
		return models.F16, TCastFP16
	}
	return models.BF16, TCastBF16
}

// layer plans one layer.
func (p *planner) layer(l models.Layer) (LayerPlan, error) {
	lp := LayerPlan{
		Module:  l.Module,
		Kind:    string(l.Kind),
		Class:   l.Class,
		Tensors: maps.Clone(l.Tensors),
		Dims:    maps.Clone(l.Dims),
		Eps:     l.Eps,
		Router:  l.Router,
	}
	if lp.Tensors == nil {
		lp.Tensors = map[string]string{}
	}
	if math.IsNaN(l.Eps) || l.Eps < 0 {
		return lp, fmt.Errorf("%w: layer %s: eps %v", ErrCannotPlan, l.Module, l.Eps)
	}
	var err error
	switch l.Kind {
	case models.KindRMSNorm, models.KindRMSNormGemma, models.KindRMSNormFP32:
		err = p.rmsnorm(l, &lp)
	case models.KindAttention:
		err = p.attention(l, &lp)
	case models.KindMLPSwiGLU, models.KindMLPGeGLU:
		err = p.mlp(l, &lp)
	case models.KindMoE:
		err = p.moe(l, &lp)
	case models.KindLinearBN, models.KindBNLinear:
		err = p.linearBN(l, &lp)
	case models.KindConvBN:
		err = p.convBN(l, &lp)
	case models.KindEmbedding:
		reason := ReasonEmbedding
		if strings.HasSuffix(l.Class, "ScaledWordEmbedding") {
			reason = ReasonScaledEmbedding
		}
		err = p.keep(l, &lp, reason)
	case models.KindLMHead:
		err = p.lmHead(l, &lp)
	case models.KindLinear:
		err = p.keep(l, &lp, ReasonLinear)
	default:
		err = p.keep(l, &lp, fmt.Sprintf("no kernel for %s layers", l.Kind))
	}
	if err != nil {
		return lp, err
	}
	lp.Transforms = layerTransforms(lp.Outputs)
	return lp, nil
}

// choose returns the first candidate kernel that is enabled, has code for every target
// backend and accepts l; else "" and the reasons each candidate was turned down.
func (p *planner) choose(l models.Layer, candidates ...string) (k *kernels.Kernel, note, why string) {
	var whys []string
	for _, name := range candidates {
		kk, ok := p.reg.ByName(name)
		if !ok {
			whys = append(whys, fmt.Sprintf("kernel %s not in the registry", name))
			continue
		}
		if r := p.unusable(kk); r != "" {
			whys = append(whys, r)
			continue
		}
		ok, reason := p.reg.Accepts(name, l, p.tensors)
		if !ok {
			whys = append(whys, name+": "+reason)
			continue
		}
		if len(whys) > 0 {
			reason = joinReasons(strings.Join(whys, "; ")+"; so "+name, reason)
		}
		return kk, reason, ""
	}
	return nil, "", strings.Join(whys, "; ")
}

// unusable says why kernel k (or a kernel it uses) cannot be used at all in this plan.
func (p *planner) unusable(k *kernels.Kernel) string {
	for _, name := range p.reg.Closure(k.Name) {
		kk, _ := p.reg.ByName(name)
		if p.disabled[name] {
			if name == k.Name {
				return fmt.Sprintf("kernel %s disabled", name)
			}
			return fmt.Sprintf("kernel %s disabled (%s uses it)", name, k.Name)
		}
		for _, b := range p.backends {
			if !slices.Contains(kk.Backends, b) {
				return fmt.Sprintf("kernel %s has no %s code", name, b)
			}
		}
		if !slices.Contains(kk.ActDTypes, p.dtype) {
			return fmt.Sprintf("kernel %s does not compute in %s", name, p.dtype)
		}
	}
	return ""
}

func joinReasons(parts ...string) string {
	var out []string
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

// lmHead replaces the logits projection by the gemm kernel with fp32 output (ReasonLMHead).
// It reads the module's own weight, row-major: an untied head writes it under its own name
// (as a kept layer does), a tied head reads the embedding table and writes nothing.
func (p *planner) lmHead(l models.Layer, lp *LayerPlan) error {
	k, note, why := p.choose(l, "gemm")
	if k == nil {
		if l.Tied {
			lp.Kernel, lp.Reason = KernelKeep, joinReasons(why, ReasonLMHeadTied)
			return nil
		}
		return p.keep(l, lp, why)
	}
	if !l.Tied {
		if err := p.keep(l, lp, ""); err != nil {
			return err
		}
	}
	lp.Kernel, lp.Layer = k.Name, k.LayerClass(l.Kind)
	lp.Bindings = []Binding{bind(l.Module, l.Class, lp.Layer, nil)}
	lp.Reason = ReasonLMHead
	if l.Tied {
		lp.Reason = joinReasons(ReasonLMHead, ReasonLMHeadTied)
	}
	if l.Softcap > 0 {
		// The causal-LM forward caps the logits after lm_head; a cap in this GEMM's epilogue
		// would be applied twice.
		lp.Reason = joinReasons(lp.Reason, fmt.Sprintf("final logit soft-capping (cap %g) runs after it in the model's "+
			"forward, on these fp32 logits", l.Softcap))
	}
	lp.Reason = joinReasons(lp.Reason, note)
	return nil
}

// keep marks l as kept on the stock path and writes its tensors under their own names
// (floating-point sources cast to the plan's dtype, which the injected model runs in and
// torch would round to the same way at load; other dtypes are copied unchanged).
func (p *planner) keep(l models.Layer, lp *LayerPlan, reason string) error {
	lp.Kernel, lp.Layer, lp.Reason = KernelKeep, "", reason
	lp.Outputs, lp.Bindings = lp.Outputs[:0], nil
	written := map[string]bool{}
	for _, role := range slices.Sorted(maps.Keys(l.Tensors)) {
		name := l.Tensors[role]
		if kernels.TrainingOnly(name) {
			continue
		}
		t := p.tensors[name]
		if t.Of != "" {
			// a view of a stacked tensor: the stock module loads the whole tensor, once
			name, t = t.Of, p.tensors[t.Of]
		}
		if written[name] {
			continue
		}
		written[name] = true
		o := TensorPlan{Name: name, Sources: []string{name}, Shape: slices.Clone(t.Shape),
			DType: string(t.DType), Layout: LayoutRowMajor}
		if dt, cast := p.target(); foldable(t.DType) && t.DType != dt {
			o.Transforms, o.DType = []string{cast}, string(dt)
		}
		lp.Outputs = append(lp.Outputs, o)
	}
	return nil
}

// Layouts of output tensors.
const (
	LayoutRowMajor = "row-major"
	LayoutKMajor   = "k-major"
)

// layerTransforms is the union of the outputs' transforms in first-seen order.
func layerTransforms(outs []TensorPlan) []string {
	var ts []string
	for _, o := range outs {
		for _, t := range o.Transforms {
			if !slices.Contains(ts, t) {
				ts = append(ts, t)
			}
		}
	}
	return ts
}
