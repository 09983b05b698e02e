package plan

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// One rule per layer kind: pick the kernel (or keep) and list the outputs PLAN.md
// defines for it. Shapes are taken from the checkpoint and checked against the layer's
// dims; a disagreement is an ErrCannotPlan (models checks shapes, so it means a bad graph).

const (
	postAttentionNorm   = "post_attention_layernorm"
	preFeedforwardNorm  = "pre_feedforward_layernorm"
	postFeedforwardNorm = "post_feedforward_layernorm"
	postMLPNorm         = "post_mlp_layernorm"
)

func (p *planner) rmsnorm(l models.Layer, lp *LayerPlan) error {
	candidates := []string{"rmsnorm"}
	switch {
	case fusable(l):
		candidates = []string{"add-rmsnorm", "rmsnorm"}
	case postBranchNorm(l):
		candidates = []string{"rmsnorm-add", "rmsnorm"}
	}
	if err := p.needRoles(l, []string{"weight"}); err != nil {
		return err
	}
	k, note, why := p.choose(l, candidates...)
	if k == nil {
		return p.keep(l, lp, why)
	}
	w := l.Tensors["weight"]
	if err := p.wantShape(l, "weight", l.Dims["hidden"]); err != nil {
		return err
	}
	lp.Kernel, lp.Layer = k.Name, k.LayerClass(l.Kind)
	decoder := blockDecoder(l)
	if l.Kind == models.KindRMSNormGemma {
		// Gemma's (1 + w) folded offline, kept fp32: the kernel multiplies in fp32 and rounds
		// once, as Gemma2RMSNorm does; the module's own weight stays for the stock path.
		o := TensorPlan{Name: l.Module + ".offset_weight", Attr: kernels.PackedAttr(layerGemmaRMSNorm, "weight"),
			Sources: []string{w}, Transforms: []string{TAddOne}, Shape: slices.Clone(p.shapeOf(w)),
			DType: string(models.F32), Layout: LayoutRowMajor}
		lp.Outputs = []TensorPlan{o}
		note = joinReasons(ReasonGemmaNorm, note)
	} else {
		lp.Outputs = []TensorPlan{p.out(w, "", "", LayoutRowMajor, p.shapeOf(w), nil, w)}
		if l.Kind == models.KindRMSNormFP32 {
			note = joinReasons(ReasonFP32Norm, note)
		}
	}
	lp.Bindings = []Binding{bind(l.Module, l.Class, lp.Layer, lp.Outputs)}
	if scaledResidual(l) && blockNorm(l) {
		// The scaled add rides in o_proj's epilogue instead, so this norm runs alone and the
		// decoder layer is what changes; it reads the scale from the block.
		why := ReasonScaledResidual
		if decoder == layerScaledMoEDecoder {
			why = ReasonScaledResidualMoE
		}
		lp.Reason = joinReasons(fmt.Sprintf(why, l.ResidualScale), note)
		db := bind(parentModule(l.Module), l.BlockClass, decoder, nil, "residual_multiplier")
		lp.Bindings = append(lp.Bindings, db)
		return nil
	}
	switch k.Name {
	case "add-rmsnorm":
		lp.Reason = joinReasons(ReasonAddRMSNorm, note)
		// The residual add before this norm lives in the decoder layer's forward, so the
		// decoder layer is what changes.
		lp.Bindings = append(lp.Bindings, bind(parentModule(l.Module), l.BlockClass, decoder, nil))
	case "rmsnorm-add":
		lp.Reason = joinReasons(ReasonRMSNormAdd, note)
		// The add after it lives in the decoder layer's forward too; the block's first norm binds
		// the layer, once for both.
		if lastPart(l.Module) == postAttentionNorm {
			lp.Bindings = append(lp.Bindings, bind(parentModule(l.Module), l.BlockClass, decoder, nil))
		}
	default:
		lp.Reason = note
	}
	return nil
}

// fusable: a blockNorm whose add is unscaled can fuse that add (add-rmsnorm, carried out by
// patching the block).
func fusable(l models.Layer) bool {
	return blockNorm(l) && !scaledResidual(l)
}

// blockNorm: the norm right after a decoder block's first residual add, in a block a decoder
// layer of ours replaces: the post-attention norm of a Llama-style block (Gemma 1's too); Gemma
// 2's and 3's blocks add after their post-attention norm, so there it is the pre-feedforward
// norm (GLM-4's block, which adds after post_self_attn_layernorm, is Llama's here). OLMo 2's
// block has none (its norms precede its adds: postBranchNorm), nor has a block no layer of ours
// replaces.
func blockNorm(l models.Layer) bool {
	switch blockDecoder(l) {
	case "", layerPostNormDecoder, layerPostNormMoEDecoder:
		return false
	case layerGemmaDecoder:
		return l.Block >= 0 && lastPart(l.Module) == preFeedforwardNorm
	}
	return l.Block >= 0 && lastPart(l.Module) == postAttentionNorm
}

// postBranchNorm: a norm whose output its block adds to the residual, in a block a layer of
// ours replaces: OLMo 2's post_attention_layernorm and post_feedforward_layernorm
// (PostNormDecoderLayer), GLM-4's post_mlp_layernorm (SandwichDecoderLayer, whose
// post_self_attn_layernorm stays a norm of its own: the add after it fuses with the next norm).
func postBranchNorm(l models.Layer) bool {
	if l.Block < 0 {
		return false
	}
	last := lastPart(l.Module)
	switch blockDecoder(l) {
	case layerPostNormDecoder, layerPostNormMoEDecoder:
		return last == postAttentionNorm || last == postFeedforwardNorm
	case layerSandwichDecoder:
		return last == postMLPNorm
	}
	return false
}

// sandwich: the layer's block normalizes each branch before adding it to the residual
// (Gemma 2's and 3's, GLM-4's: the GemmaDecoderLayer and SandwichDecoderLayer layers).
func sandwich(l models.Layer) bool {
	d := blockDecoder(l)
	return d == layerGemmaDecoder || d == layerSandwichDecoder
}

// blockDecoder is the layer that patches the layer's block, by its class (contract.json), the
// first of kernels.DecoderLayers that replaces it: MoEDecoderLayer (Mixtral's parameter order),
// GemmaDecoderLayer (sandwich norms), PostNormDecoderLayer (a norm after each branch, none
// before), SandwichDecoderLayer (GLM-4's norm before and after each branch) or DecoderLayer; ""
// for a block class none of them replaces.
func blockDecoder(l models.Layer) string {
	for _, d := range kernels.DecoderLayers {
		if kernels.LayerReplaces(d, l.BlockClass) {
			return d
		}
	}
	return ""
}

// scaledResidual: the block multiplies the branch it adds before this norm by a scale other
// than 1 (Granite's residual_multiplier).
func scaledResidual(l models.Layer) bool {
	return l.ResidualScale != 0 && l.ResidualScale != 1
}

// Layer classes the rules bind besides the registry's (contract.json names them all).
const (
	layerGemmaDecoder    = "GemmaDecoderLayer"
	layerPostNormDecoder = "PostNormDecoderLayer"
	// layerPostNormMoEDecoder is PostNormDecoderLayer's block under OLMoE's parameters (FlexOlmo).
	layerPostNormMoEDecoder = "PostNormMoEDecoderLayer"
	layerSandwichDecoder    = "SandwichDecoderLayer"
	layerRMSNorm            = "RMSNorm"
	layerGemmaRMSNorm       = "GemmaRMSNorm"
	layerFP32RMSNorm        = "FP32RMSNorm"
	layerConvBN             = "ConvBN"
	layerFusedAttn          = "FusedAttention"
	layerFusedSwiGLU        = "FusedSwiGLUMLP"
	layerSwiGLU             = "SwiGLUMLP"
	fusedQKVRole            = "qkv_proj.weight"
	fusedGateUpRole         = "gate_up_proj.weight"
)

// bind is a Binding whose reads are the layer's own (contract.json) followed by the
// packed attributes its outputs attach and then extra (children it calls).
func bind(module, class, layer string, outs []TensorPlan, extra ...string) Binding {
	reads := kernels.LayerReads(layer)
	for _, o := range outs {
		if o.Attr != "" {
			reads = append(reads, o.Attr)
		}
	}
	return Binding{Module: module, Class: class, Layer: layer, Reads: append(reads, extra...)}
}

func parentModule(module string) string {
	if i := strings.LastIndexByte(module, '.'); i >= 0 {
		return module[:i]
	}
	return ""
}

// vendorRoutes converts the registry's matched routes into the plan's.
func vendorRoutes(rs []kernels.VendorRoute) []VendorRoute {
	var out []VendorRoute
	for _, r := range rs {
		out = append(out, VendorRoute{Op: r.Op, MinTokens: r.MinTokens, MaxTokens: r.MaxTokens, Reason: r.Reason})
	}
	return out
}

// decoderPatched reports whether block's post-attention RMSNorm runs add-rmsnorm, which
// means the decoder layer's forward is replaced (kernels' DecoderLayer) and runs the MLP
// inline with the residual add in the down projection's epilogue.
func (p *planner) decoderPatched(block int) bool {
	if block < 0 {
		return false
	}
	for _, l := range p.g.Layers {
		// Gemma 2's, 3's and GLM-4's patched blocks run their MLP as a module (a norm sits
		// between the MLP and the residual add), so only the Llama-style block inlines it.
		if l.Block == block && (l.Kind == models.KindRMSNorm || l.Kind == models.KindRMSNormGemma || l.Kind == models.KindRMSNormFP32) &&
			blockNorm(l) && !sandwich(l) {
			kernel := "add-rmsnorm"
			if scaledResidual(l) { // the adds ride in the projections' epilogues
				kernel = "rmsnorm"
			}
			k, _, _ := p.choose(l, kernel)
			return k != nil
		}
	}
	return false
}

var attentionRoles = []string{"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"}
var attentionOptional = []string{"q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias", "q_norm.weight", "k_norm.weight"}

func (p *planner) attention(l models.Layer, lp *LayerPlan) error {
	if _, ok := l.Tensors[fusedQKVRole]; ok {
		return p.fusedAttention(l, lp)
	}
	if _, ok := l.Tensors["q_proj.weight"]; !ok {
		if _, ok := l.Tensors["attention_biases"]; ok {
			return p.keep(l, lp, ReasonLeViTAttention)
		}
		return p.keep(l, lp, fmt.Sprintf("attention without q/k/v/o projections (roles: %s): no kernel applies; stock path",
			strings.Join(slices.Sorted(maps.Keys(l.Tensors)), ", ")))
	}
	if extra := unknownRoles(l, attentionRoles, attentionOptional); len(extra) > 0 {
		return p.keep(l, lp, fmt.Sprintf("attention has tensors the Attention layer does not read (%s); stock path",
			strings.Join(extra, ", ")))
	}
	if err := p.needRoles(l, attentionRoles); err != nil {
		return err
	}
	nb := 0
	for _, r := range []string{"q_proj.bias", "k_proj.bias", "v_proj.bias"} {
		if _, ok := l.Tensors[r]; ok {
			nb++
		}
	}
	if nb != 0 && nb != 3 {
		return p.keep(l, lp, "only some of q/k/v carry a bias; concat-qkv needs all three or none; stock path")
	}
	if why := p.stockAttention(l); why != "" {
		return p.keep(l, lp, why)
	}
	k, note, why := p.choose(l, "attention-prefill")
	if k == nil {
		return p.keep(l, lp, why)
	}
	vendor := vendorRoutes(p.reg.VendorOps(k.Name, l, p.tensors))
	d := l.Dims
	hidden, h, kv, hd := d["hidden"], d["heads"], d["kv_heads"], d["head_dim"]
	qn, err1 := mul(h, hd)
	kvn, err2 := mul(kv, hd)
	if err := errors2(err1, err2); err != nil {
		return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
	}
	for _, c := range []struct {
		role string
		want []int64
	}{
		{"q_proj.weight", []int64{qn, hidden}}, {"k_proj.weight", []int64{kvn, hidden}},
		{"v_proj.weight", []int64{kvn, hidden}}, {"o_proj.weight", []int64{hidden, qn}},
		{"q_proj.bias", []int64{qn}}, {"k_proj.bias", []int64{kvn}}, {"v_proj.bias", []int64{kvn}},
		{"o_proj.bias", []int64{hidden}},
	} {
		if _, ok := l.Tensors[c.role]; ok {
			if err := p.wantShape(l, c.role, c.want...); err != nil {
				return err
			}
		}
	}
	// q/k norms over head_dim (Qwen3, Gemma 3), or over all the heads before the split (OLMo 2)
	qNormW, kNormW := hd, hd
	if _, ok := l.Tensors["q_norm.weight"]; ok && slices.Equal(p.shapeOf(l.Tensors["q_norm.weight"]), []int64{qn}) {
		qNormW, kNormW = qn, kvn
	}
	for _, c := range []struct {
		role string
		n    int64
	}{{"q_norm.weight", qNormW}, {"k_norm.weight", kNormW}} {
		if _, ok := l.Tensors[c.role]; ok {
			if err := p.wantShape(l, c.role, c.n); err != nil {
				return err
			}
		}
	}
	t := l.Tensors
	m := l.Module
	total, err := sum(qn, kvn, kvn)
	if err != nil {
		return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
	}
	split := []int64{qn, kvn, kvn}
	qkv := []string{t["q_proj.weight"], t["k_proj.weight"], t["v_proj.weight"]}
	lp.Outputs = []TensorPlan{
		p.out(m+".qkv_proj.weight", "weight", kernels.PackedAttr("Attention", "qkv_weight"), LayoutKMajor, []int64{hidden, total}, split, qkv...),
	}
	main := []string{TConcatQKV}
	if l.InterleavedRotary {
		main = append(main, TRopeDeinterleave)
	}
	lp.Outputs[0].Transforms = append(slices.Clone(main), lp.Outputs[0].Transforms...)
	if nb == 3 {
		b := p.out(m+".qkv_proj.bias", "bias", kernels.PackedAttr("Attention", "qkv_bias"), LayoutRowMajor, []int64{total}, split,
			t["q_proj.bias"], t["k_proj.bias"], t["v_proj.bias"])
		b.Transforms = append(slices.Clone(main), b.Transforms...)
		lp.Outputs = append(lp.Outputs, b)
	}
	lp.Outputs = append(lp.Outputs,
		p.out(m+".o_proj.weight", "", kernels.PackedAttr("Attention", "o_weight"), LayoutKMajor, []int64{qn, hidden}, nil, t["o_proj.weight"]))
	if ob, ok := t["o_proj.bias"]; ok {
		lp.Outputs = append(lp.Outputs, p.out(m+".o_proj.bias", "", kernels.PackedAttr("Attention", "o_bias"), LayoutRowMajor, []int64{hidden}, nil, ob))
	}
	lp.Kernel, lp.Layer = k.Name, k.LayerClass(l.Kind)
	// qwen3's and Gemma 3's per-head q/k RMSNorms and OLMo 2's whole-projection ones run inside
	// the attention layer (it calls them), so their modules get a norm layer too. Gemma's
	// (1 + w) form gets GemmaRMSNorm, which makes 1 + w in fp32 from the module's weight on first
	// use (packed attributes attach to the attention module, not to its children): stock's own
	// numbers. OLMo 2's gets FP32RMSNorm. A norm's module is its tensor's (HunYuan's are
	// query_layernorm and key_layernorm).
	var children []string
	var childBindings []Binding
	for _, role := range []string{"q_norm", "k_norm"} {
		n, ok := t[role+".weight"]
		if !ok {
			continue
		}
		c := strings.TrimSuffix(strings.TrimPrefix(n, m+"."), ".weight")
		cls := l.Children[c]
		if cls == "" {
			return fmt.Errorf("%w: layer %s has a %s tensor but the graph names no class for its %s module", ErrCannotPlan, m, role+".weight", c)
		}
		layer := layerRMSNorm
		for _, nl := range []string{layerGemmaRMSNorm, layerFP32RMSNorm} {
			if kernels.LayerReplaces(nl, cls) {
				layer = nl
			}
		}
		lp.Outputs = append(lp.Outputs, p.out(n, "", "", LayoutRowMajor, slices.Clone(p.shapeOf(n)), nil, n))
		children = append(children, c)
		childBindings = append(childBindings, bind(m+"."+c, cls, layer, nil))
	}
	if l.Rope == models.RopeNone {
		// the switches the layer reads: inject checks the module has them
		if kernels.GlobalNoPE(l.Class) {
			children = append(children, "sliding_window", "is_sliding")
		} else {
			children = append(children, "use_rope")
		}
	}
	ab := bind(m, l.Class, lp.Layer, lp.Outputs, children...)
	ab.Vendor = vendor
	lp.Bindings = append([]Binding{ab}, childBindings...)
	reason := "prefill runs attention-prefill, generation attention-decode; RoPE by rope; q/k/v and o projections by gemm"
	lp.Reason = joinReasons(reason+p.variantReason(l)+vendorReason(vendor), note)
	return nil
}

// variantReason is the reason's part for the attention variants a layer runs, "" when none.
func (p *planner) variantReason(l models.Layer) string {
	var r string
	if l.Softcap > 0 {
		r += fmt.Sprintf("; logit soft-capping (tanh, cap %g) in the kernels", l.Softcap)
	}
	if n, ok := l.Tensors["q_norm.weight"]; ok && len(p.shapeOf(n)) == 1 && p.shapeOf(n)[0] != l.Dims["head_dim"] {
		r += "; q_norm and k_norm over the whole projection, every head at once, before the split (their own launches)"
	}
	if l.QKNormAfterRope {
		r += "; q/k norms on the rotated heads, after RoPE, in its launch"
	}
	if rd := l.Dims["rotary_dim"]; rd > 0 {
		r += fmt.Sprintf("; partial rotary: %d of %d channels of each head rotate", rd, l.Dims["head_dim"])
	}
	if l.InterleavedRotary {
		r += "; interleaved rotary pairs: each q and k head's rotated rows reordered offline (rope-deinterleave) " +
			"so the rotate-half kernels compute it, q·k unchanged"
	}
	if l.Rope == models.RopeNone {
		r += "; no RoPE on this layer (NoPE): the RoPE launch rotates nothing and still writes the cache"
	}
	if sw := p.slidingWindow(l); sw > 0 {
		r += fmt.Sprintf("; sliding window %d: in the 4-D mask transformers passes, and decode over a static "+
			"cache skips keys older than it", sw)
	}
	return r
}

// stockAttention is why an attention layer stays on the stock path whatever the kernels'
// shape constraints say, "" when nothing does: each variant the attention and RoPE kernels
// do not compute yet.
func (p *planner) stockAttention(l models.Layer) string {
	var why []string
	if l.Rope != "" && l.Rope != models.RopeNone {
		why = append(why, fmt.Sprintf("%s RoPE picks its factors by a host-side length test a captured graph would hide", l.Rope))
	}
	if l.QKNormAfterRope && !kernels.QKNormsAfterRope(l.Class) {
		why = append(why, fmt.Sprintf("q/k norms after RoPE, but contract.json's qk_norms_after_rope does not list %s, "+
			"so the package would run them before it", l.Class))
	}
	if l.InterleavedRotary {
		// The reorder is of separate q and k projections; q/k norms would need their
		// weights reordered alike.
		if _, ok := l.Tensors[fusedQKVRole]; ok {
			why = append(why, "interleaved rotary pairs in a fused qkv_proj are not reordered offline")
		}
		if _, ok := l.Tensors["q_norm.weight"]; ok {
			why = append(why, "interleaved rotary pairs with q/k norms are not reordered offline")
		}
		if !kernels.RotatesInterleaved(l.Class) {
			why = append(why, fmt.Sprintf("interleaved rotary pairs, but contract.json's interleaved_rotary does not "+
				"list %s, so packing on the device would not reorder them", l.Class))
		}
	}
	if len(why) == 0 {
		return ""
	}
	// A shape the kernels refuse anyway (head_dim 256) is said too.
	if k, _, refused := p.choose(l, "attention-prefill"); k == nil {
		why = append([]string{refused}, why...)
	}
	return strings.Join(why, "; ") + "; stock path"
}

// fusedAttention plans an attention whose checkpoint holds q/k/v as one qkv_proj (Phi-3):
// the fused weight is kept as it is, transposed to K-major, its split recorded.
func (p *planner) fusedAttention(l models.Layer, lp *LayerPlan) error {
	required := []string{fusedQKVRole, "o_proj.weight"}
	if extra := unknownRoles(l, required, nil); len(extra) > 0 {
		return p.keep(l, lp, fmt.Sprintf("attention has tensors the FusedAttention layer does not read (%s); stock path",
			strings.Join(extra, ", ")))
	}
	if err := p.needRoles(l, required); err != nil {
		return err
	}
	if why := p.stockAttention(l); why != "" {
		return p.keep(l, lp, why)
	}
	k, note, why := p.choose(l, "attention-prefill")
	if k == nil {
		return p.keep(l, lp, why)
	}
	d := l.Dims
	hidden, h, kv, hd := d["hidden"], d["heads"], d["kv_heads"], d["head_dim"]
	qn, err1 := mul(h, hd)
	kvn, err2 := mul(kv, hd)
	if err := errors2(err1, err2); err != nil {
		return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
	}
	total, err := sum(qn, kvn, kvn)
	if err != nil {
		return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
	}
	if err := p.wantShape(l, fusedQKVRole, total, hidden); err != nil {
		return err
	}
	if err := p.wantShape(l, "o_proj.weight", hidden, qn); err != nil {
		return err
	}
	t, m := l.Tensors, l.Module
	layer := layerFusedAttn
	qkv := p.out(m+".qkv_proj.weight", "weight", kernels.PackedAttr(layer, "qkv_weight"), LayoutKMajor,
		[]int64{hidden, total}, []int64{qn, kvn, kvn}, t[fusedQKVRole])
	o := p.out(m+".o_proj.weight", "", kernels.PackedAttr(layer, "o_weight"), LayoutKMajor, []int64{qn, hidden}, nil, t["o_proj.weight"])
	lp.Outputs = []TensorPlan{qkv, o}
	lp.Kernel, lp.Layer = k.Name, layer
	ab := bind(m, l.Class, layer, lp.Outputs)
	ab.Vendor = vendorRoutes(p.reg.VendorOps(k.Name, l, p.tensors))
	lp.Bindings = []Binding{ab}
	reason := "qkv_proj kept fused as the checkpoint has it (split q, k, v recorded); prefill runs attention-prefill, " +
		"generation attention-decode; RoPE by rope; qkv and o projections by gemm"
	lp.Reason = joinReasons(reason+p.variantReason(l)+vendorReason(ab.Vendor), note)
	return nil
}

// slidingWindow is the layer's attention window, 0 for full attention: dims
// "sliding_window", else config.json's sliding_window unless use_sliding_window is false
// (Qwen2 configs carry a window they do not use).
func (p *planner) slidingWindow(l models.Layer) int64 {
	if sw := l.Dims["sliding_window"]; sw > 0 {
		return sw
	}
	cfg := p.g.Checkpoint.Config
	// Gemma's and SmolLM3's windows are per layer (layer_types, or each config class's default
	// pattern), and models puts them in Dims: their other layers are full attention.
	if models.LayerWindows(p.g.Arch) {
		return 0
	}
	if v, ok := cfg["layer_types"]; ok && v != nil {
		return 0
	}
	sw, ok := cfg["sliding_window"].(float64)
	if !ok || sw <= 0 || sw > math.MaxInt32 {
		return 0
	}
	if use, ok := cfg["use_sliding_window"].(bool); ok && !use {
		return 0
	}
	return int64(sw)
}

// vendorReason is the reason's part for a layer's vendor routes, "" when none:
// "; <op> on the vendor path faster for <when> (<measured>)" per route, in op order.
func vendorReason(vendor []VendorRoute) string {
	rs := slices.Clone(vendor)
	slices.SortStableFunc(rs, func(a, b VendorRoute) int { return strings.Compare(a.Op, b.Op) })
	var b strings.Builder
	for _, r := range rs {
		b.WriteString("; " + r.Op + " on the " + r.Reason)
	}
	return b.String()
}

var mlpRoles = []string{"gate_proj.weight", "up_proj.weight", "down_proj.weight"}

func (p *planner) mlp(l models.Layer, lp *LayerPlan) error {
	_, fused := l.Tensors[fusedGateUpRole]
	roles := mlpRoles
	if fused {
		roles = []string{fusedGateUpRole, "down_proj.weight"}
	}
	layer, epilogue := layerSwiGLU, kernels.EpilogueSwiGLU
	switch {
	case l.Kind == models.KindMLPGeGLU:
		layer, epilogue = "GeGLUMLP", kernels.GeGLUEpilogue(l)
	case fused:
		layer = layerFusedSwiGLU
	}
	if extra := unknownRoles(l, roles, nil); len(extra) > 0 {
		return p.keep(l, lp, fmt.Sprintf("MLP has tensors the %s layer does not read (%s); stock path",
			layer, strings.Join(extra, ", ")))
	}
	if err := p.needRoles(l, roles); err != nil {
		return err
	}
	k, note, why := p.choose(l, "gemm")
	if k == nil {
		return p.keep(l, lp, why)
	}
	hidden, inter := l.Dims["hidden"], l.Dims["intermediate"]
	twoI, err := sum(inter, inter)
	if err != nil {
		return fmt.Errorf("%w: layer %s: %v", ErrCannotPlan, l.Module, err)
	}
	want := []struct {
		role string
		want []int64
	}{
		{"gate_proj.weight", []int64{inter, hidden}}, {"up_proj.weight", []int64{inter, hidden}},
		{"down_proj.weight", []int64{hidden, inter}},
	}
	if fused {
		want = want[1:]
		want[0] = struct {
			role string
			want []int64
		}{fusedGateUpRole, []int64{twoI, hidden}}
	}
	for _, c := range want {
		if err := p.wantShape(l, c.role, c.want...); err != nil {
			return err
		}
	}
	t, m := l.Tensors, l.Module
	var gu TensorPlan
	if fused {
		// Phi-3's gate_up_proj is [gate | up] along the output already: kept as it is.
		gu = p.out(m+".gate_up_proj.weight", "weight", kernels.PackedAttr(layer, "gate_up_weight"), LayoutKMajor,
			[]int64{hidden, twoI}, []int64{inter, inter}, t[fusedGateUpRole])
	} else {
		gu = p.out(m+".gate_up_proj.weight", "weight", kernels.PackedAttr(layer, "gate_up_weight"), LayoutKMajor,
			[]int64{hidden, twoI}, []int64{inter, inter}, t["gate_proj.weight"], t["up_proj.weight"])
		gu.Transforms = append([]string{TConcatGateUp}, gu.Transforms...)
	}
	down := p.out(m+".down_proj.weight", "", kernels.PackedAttr(layer, "down_weight"), LayoutKMajor,
		[]int64{inter, hidden}, nil, t["down_proj.weight"])
	lp.Outputs = []TensorPlan{gu, down}
	lp.Kernel, lp.Layer = k.Name, layer
	mb := bind(m, l.Class, lp.Layer, lp.Outputs)
	mb.Vendor = vendorRoutes(p.reg.VendorOps(k.Name, l, p.tensors))
	lp.Bindings = []Binding{mb}
	what := "gate/up by one GEMM with the " + epilogue + " epilogue, down by a plain GEMM"
	if p.decoderPatched(l.Block) {
		what = "gate/up by one GEMM with the " + epilogue + " epilogue, down by a GEMM with the decoder layer's residual add in its epilogue"
	}
	if fused {
		what = "gate_up_proj kept fused as the checkpoint has it (split gate, up recorded); " + what
	}
	lp.Reason = joinReasons(what+vendorReason(mb.Vendor), note)
	return nil
}

var bnRoles = []string{"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}

// bnSources lists γ, β, μ, σ² in PLAN.md's order.
func bnSources(t map[string]string) []string {
	return []string{t["bn.weight"], t["bn.bias"], t["bn.running_mean"], t["bn.running_var"]}
}

func (p *planner) linearBN(l models.Layer, lp *LayerPlan) error {
	required := append([]string{"linear.weight"}, bnRoles...)
	optional := []string{"linear.bias", "bn.num_batches_tracked"}
	if extra := unknownRoles(l, required, optional); len(extra) > 0 {
		return p.keep(l, lp, fmt.Sprintf("%s layer has tensors the fold does not know (%s); stock path",
			l.Kind, strings.Join(extra, ", ")))
	}
	if err := p.needRoles(l, required); err != nil {
		return err
	}
	k, note, why := p.choose(l, "gemm")
	if k == nil {
		return p.keep(l, lp, why)
	}
	in, out := l.Dims["in"], l.Dims["out"]
	bnDim := out
	if l.Kind == models.KindBNLinear {
		bnDim = in
	}
	if err := p.wantShape(l, "linear.weight", out, in); err != nil {
		return err
	}
	if _, ok := l.Tensors["linear.bias"]; ok {
		if err := p.wantShape(l, "linear.bias", out); err != nil {
			return err
		}
	}
	for _, r := range bnRoles {
		if err := p.wantShape(l, r, bnDim); err != nil {
			return err
		}
	}
	t, m := l.Tensors, l.Module
	bn := bnSources(t)
	fold := TFoldBN
	wsrc := append([]string{t["linear.weight"]}, bn...)
	var bsrc []string
	if l.Kind == models.KindBNLinear {
		fold = TFoldBNInput
		bsrc = []string{t["linear.weight"]}
	}
	if b, ok := t["linear.bias"]; ok {
		bsrc = append(bsrc, b)
	}
	bsrc = append(bsrc, bn...)
	layer := k.LayerClass(l.Kind)
	dt, cast := p.target()
	w := TensorPlan{Name: m + ".folded.weight", Role: "weight", Attr: kernels.PackedAttr(layer, "weight"), Sources: wsrc,
		Transforms: []string{fold, cast, TPrepackKMajor}, Shape: []int64{in, out},
		DType: string(dt), Layout: LayoutKMajor}
	b := TensorPlan{Name: m + ".folded.bias", Role: "bias", Attr: kernels.PackedAttr(layer, "bias"), Sources: bsrc,
		Transforms: []string{fold, cast}, Shape: []int64{out},
		DType: string(dt), Layout: LayoutRowMajor}
	lp.Outputs = []TensorPlan{w, b}
	lp.Kernel, lp.Layer = k.Name, layer
	lp.Bindings = []Binding{bind(m, l.Class, layer, lp.Outputs)}
	what := "BatchNorm folded into the Linear"
	if l.Kind == models.KindBNLinear {
		what = "input BatchNorm folded into the Linear"
	}
	lp.Reason = joinReasons(what+"; one GEMM with the bias epilogue", note)
	return nil
}

func (p *planner) convBN(l models.Layer, lp *LayerPlan) error {
	required := append([]string{"conv.weight"}, bnRoles...)
	optional := []string{"conv.bias", "bn.num_batches_tracked"}
	if extra := unknownRoles(l, required, optional); len(extra) > 0 {
		return p.keep(l, lp, fmt.Sprintf("conv-bn layer has tensors the fold does not know (%s); stock path",
			strings.Join(extra, ", ")))
	}
	if err := p.needRoles(l, required); err != nil {
		return err
	}
	for _, role := range slices.Sorted(maps.Keys(l.Tensors)) {
		name := l.Tensors[role]
		if kernels.TrainingOnly(name) {
			continue
		}
		if dt := p.tensors[name].DType; !foldable(dt) {
			return p.keep(l, lp, fmt.Sprintf("source dtype %s of %s (%s) cannot be folded (F32, F16, BF16 only); stock path",
				dt, name, role))
		}
	}
	t, m := l.Tensors, l.Module
	ws := p.shapeOf(t["conv.weight"])
	if len(ws) != 4 {
		return fmt.Errorf("%w: layer %s: conv.weight %s has shape %v, want 4-D [out, in, kh, kw]",
			ErrCannotPlan, m, t["conv.weight"], ws)
	}
	outCh := ws[0]
	if o, ok := l.Dims["out"]; ok && o != outCh {
		return fmt.Errorf("%w: layer %s: conv.weight %s has %d output channels, dims say out=%d", ErrCannotPlan, m, t["conv.weight"], outCh, o)
	}
	for _, r := range append([]string{"conv.bias"}, bnRoles...) {
		if _, ok := t[r]; ok {
			if err := p.wantShape(l, r, outCh); err != nil {
				return err
			}
		}
	}
	bn := bnSources(t)
	var bsrc []string
	if b, ok := t["conv.bias"]; ok {
		bsrc = append(bsrc, b)
	}
	bsrc = append(bsrc, bn...)
	dt, cast := p.target()
	lp.Outputs = []TensorPlan{
		{Name: m + ".folded.weight", Role: "weight", Attr: kernels.PackedAttr(layerConvBN, "weight"),
			Sources: append([]string{t["conv.weight"]}, bn...), Transforms: []string{TFoldConvBN, cast},
			Shape: slices.Clone(ws), DType: string(dt), Layout: LayoutRowMajor},
		{Name: m + ".folded.bias", Role: "bias", Attr: kernels.PackedAttr(layerConvBN, "bias"), Sources: bsrc,
			Transforms: []string{TFoldConvBN, cast}, Shape: []int64{outCh},
			DType: string(dt), Layout: LayoutRowMajor},
	}
	// No Triton kernel runs (keep), but the module's forward changes: ConvBN runs stock
	// conv2d on the folded tensors.
	lp.Kernel, lp.Layer, lp.Reason = KernelKeep, layerConvBN, ReasonConvBN
	lp.Bindings = []Binding{bind(m, l.Class, layerConvBN, lp.Outputs)}
	return nil
}

func foldable(dt models.DType) bool {
	return dt == models.F32 || dt == models.F16 || dt == models.BF16
}

// out builds a TensorPlan in the plan's dtype: the cast is listed when any source is of
// another dtype (a source already in it is copied or rearranged without rounding), then
// prepack-kmajor for k-major outputs.
func (p *planner) out(name, role, attr, layout string, shape, split []int64, sources ...string) TensorPlan {
	dt, cast := p.target()
	o := TensorPlan{Name: name, Role: role, Attr: attr, Sources: sources, Shape: slices.Clone(shape),
		DType: string(dt), Layout: layout, Split: slices.Clone(split)}
	for _, s := range sources {
		if p.tensors[s].DType != dt {
			o.Transforms = []string{cast}
			break
		}
	}
	if layout == LayoutKMajor {
		o.Transforms = append(o.Transforms, TPrepackKMajor)
	}
	return o
}

func (p *planner) shapeOf(name string) []int64 { return p.tensors[name].Shape }

// wantShape checks the shape of the tensor in role against want.
func (p *planner) wantShape(l models.Layer, role string, want ...int64) error {
	name := l.Tensors[role]
	got := p.shapeOf(name)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%w: layer %s: tensor %q (%s) has shape %v, the layer's dims want %v",
			ErrCannotPlan, l.Module, name, role, got, want)
	}
	return nil
}

// needRoles checks that l has every role in required.
func (p *planner) needRoles(l models.Layer, required []string) error {
	var missing []string
	for _, r := range required {
		if _, ok := l.Tensors[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s layer %s has no %s tensor", ErrCannotPlan, l.Kind, l.Module, strings.Join(missing, ", "))
	}
	return nil
}

// unknownRoles lists roles of l in neither required nor optional.
func unknownRoles(l models.Layer, required, optional []string) []string {
	var out []string
	for _, r := range slices.Sorted(maps.Keys(l.Tensors)) {
		if !slices.Contains(required, r) && !slices.Contains(optional, r) {
			out = append(out, r)
		}
	}
	return out
}

func lastPart(module string) string {
	if i := strings.LastIndexByte(module, '.'); i >= 0 {
		return module[i+1:]
	}
	return module
}

// mul multiplies two non-negative dims, failing on overflow.
func mul(a, b int64) (int64, error) {
	if a < 0 || b < 0 {
		return 0, fmt.Errorf("negative dimension %d x %d", a, b)
	}
	if a != 0 && b > math.MaxInt64/a {
		return 0, fmt.Errorf("dimension %d x %d overflows", a, b)
	}
	return a * b, nil
}

// sum adds non-negative dims, failing on overflow.
func sum(v ...int64) (int64, error) {
	var t int64
	for _, x := range v {
		if x < 0 || t > math.MaxInt64-x {
			return 0, fmt.Errorf("dimension sum %v overflows", v)
		}
		t += x
	}
	return t, nil
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
