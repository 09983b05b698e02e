// Package models opens Hugging Face checkpoints (config.json + safetensors, single or
// sharded) without loading tensor data, and maps each supported architecture's tensors
// to typed layers whose shapes are checked against the config.
//
// Adding an architecture is one file: a config struct, a tensor-name table and a
// Build function registered with Register (see llama.go).
package models

import "fmt"

// DType is a safetensors dtype string ("F32", "F16", "BF16", ...).
type DType string

// The dtypes safetensors defines (safetensors/src/tensor.rs, Dtype enum).
const (
	BOOL   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
)

// Size is the byte width of one element, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case BOOL, U8, I8, F8E5M2, F8E4M3:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case F64, I64, U64:
		return 8
	}
	return 0
}

// Tensor describes one tensor of a checkpoint: where its bytes are, not the bytes.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	// File is the path of the safetensors file holding the tensor.
	File string
	// Offset is the absolute byte offset of the tensor's data in File,
	// Size its length in bytes (= product(Shape) * DType.Size()).
	Offset int64
	Size   int64
	// Of names the tensor this one is a contiguous part of (Checkpoint.AddView: one expert
	// of experts stored stacked in one tensor), "" for a tensor the file itself names.
	Of string `json:",omitempty" yaml:",omitempty"`
}

// Elems is the number of elements (product of Shape; 1 for a scalar).
func (t *Tensor) Elems() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// LayerKind says what a layer computes, independent of the architecture.
type LayerKind string

const (
	KindEmbedding LayerKind = "embedding" // token embedding table
	KindRMSNorm   LayerKind = "rmsnorm"   // y = x / rms(x) * weight
	// KindRMSNormGemma is Gemma's RMSNorm: y = (x / rms(x)) * (1 + weight), all in fp32,
	// rounded once (Gemma2RMSNorm, transformers models/gemma2/modeling_gemma2.py).
	KindRMSNormGemma LayerKind = "rmsnorm-gemma"
	// KindRMSNormFP32 is y = (weight * (x / rms(x))) in fp32, rounded once: the weight
	// multiplies the unrounded normalized row (Olmo2RMSNorm, models/olmo2/modeling_olmo2.py).
	KindRMSNormFP32 LayerKind = "rmsnorm-fp32"
	KindAttention   LayerKind = "attention"  // q/k/v/o projections + (causal) attention, GQA
	KindMLPSwiGLU   LayerKind = "mlp-swiglu" // down(silu(gate(x)) * up(x))
	KindMLPGeGLU    LayerKind = "mlp-geglu"  // down(gelu_tanh(gate(x)) * up(x))  (Gemma; Activation may name exact gelu)
	KindLinear      LayerKind = "linear"     // y = x W^T (+ b)
	KindLinearBN    LayerKind = "linear-bn"  // y = BN(x W^T (+ b))  (LeViT MLP / attention projections)
	KindBNLinear    LayerKind = "bn-linear"  // y = BN(x) W^T + b    (LeViT classifier heads)
	KindConvBN      LayerKind = "conv-bn"    // y = BN(conv2d(x))    (LeViT patch embedding)
	KindLMHead      LayerKind = "lm-head"    // logits = x E^T (own weight or tied embedding)
	// KindMoE is a sparse mixture-of-experts block: a router picks top_k of the experts per
	// token, each a SwiGLU MLP, and their outputs are summed with the routing weights.
	KindMoE LayerKind = "moe-swiglu"
)

// RopeNone is Layer.Rope of an attention that rotates nothing (SmolLM3's NoPE layers).
const RopeNone = "none"

// Layer is one replaceable module of a model: its transformers module path, class,
// the tensors it owns by role, and the shape facts planning needs.
type Layer struct {
	// Module is the transformers module path, e.g. "model.layers.0.self_attn".
	Module string
	Kind   LayerKind
	// Class is the transformers class of the module, e.g. "LlamaRMSNorm".
	Class string
	// Tensors maps a role ("weight", "q_proj.weight", "bn.running_var", ...) to a
	// checkpoint tensor name. Roles are stable per kind; see each architecture file.
	Tensors map[string]string
	// Dims holds integer facts: "hidden", "in", "out", "heads", "kv_heads",
	// "head_dim", "intermediate", "vocab", ... (per kind; see the architecture file).
	// Attention layers may add "sliding_window" (the layer's window) and "rotary_dim"
	// (rotated channels of each head, when fewer than head_dim).
	Dims map[string]int64
	// Eps is the normalization epsilon where the layer has one (RMSNorm, BatchNorm).
	Eps float64 `json:",omitempty" yaml:",omitempty"`
	// Bias reports whether the projections carry biases.
	Bias bool `json:",omitempty" yaml:",omitempty"`
	// Tied marks an lm-head that reuses the embedding table.
	Tied bool `json:",omitempty" yaml:",omitempty"`
	// Softcap is the tanh soft-capping cap: of the attention logits for an attention
	// layer (Gemma 2's attn_logit_softcapping), of the final logits for an lm-head
	// (final_logit_softcapping); 0 when none.
	Softcap float64 `json:",omitempty" yaml:",omitempty"`
	// Rope is the attention's RoPE type when it is not the default one ("longrope"), or
	// RopeNone for a layer that applies none.
	Rope string `json:",omitempty" yaml:",omitempty"`
	// InterleavedRotary marks an attention whose RoPE rotates adjacent channel pairs
	// (2i, 2i+1) of each head (GLM's rotate_half) where Llama's rotates (i, i + rotary/2).
	// Planning reorders the q and k rows offline so the rotate-half kernels compute it.
	InterleavedRotary bool `json:",omitempty" yaml:",omitempty"`
	// QKNormAfterRope marks an attention whose per-head q/k norms (roles q_norm.weight and
	// k_norm.weight) normalize the rotated heads, after RoPE (HunYuan's query_layernorm and
	// key_layernorm), where Qwen3's normalize them before it.
	QKNormAfterRope bool `json:",omitempty" yaml:",omitempty"`
	// ResidualScale, on the norm after a decoder block's first residual add, is the factor
	// the block multiplies each branch by before adding it to the residual (Granite's
	// residual_multiplier); 0 when it adds them as they are.
	ResidualScale float64 `json:",omitempty" yaml:",omitempty"`
	// Activation is an MLP's activation where its kind computes more than one: for
	// mlp-geglu, ActGeLUExact (Gemma 1's published "gelu"); "" is the kind's own
	// (gelu_pytorch_tanh).
	Activation string `json:",omitempty" yaml:",omitempty"`
	// Router is an MoE block's routing rule (RouterSoftmaxTopK, ...), "" elsewhere.
	Router string `json:",omitempty" yaml:",omitempty"`
	// Block is the index of the decoder/transformer block the layer sits in, -1 outside.
	Block int
	// BlockClass is the transformers class of that block's module (the decoder layer a
	// fused residual add + RMSNorm patches), "" where the architecture has none.
	BlockClass string `json:",omitempty" yaml:",omitempty"`
	// Children maps the child modules the layer's forward calls on its own (qwen3's
	// q_norm, k_norm) to their transformers classes.
	Children map[string]string `json:",omitempty" yaml:",omitempty"`
}

// Graph is a checkpoint mapped to typed layers.
type Graph struct {
	Arch       string // model_type, e.g. "llama"
	Checkpoint *Checkpoint
	Layers     []Layer
}

// ShapeError is returned when a tensor's shape disagrees with the config.
type ShapeError struct {
	Tensor  string
	Want    []int64
	Got     []int64
	Because string // what in the config implies Want, e.g. "hidden_size=64"
}

func (e *ShapeError) Error() string {
	s := fmt.Sprintf("models: tensor %q: shape %v, config wants %v", e.Tensor, e.Got, e.Want)
	if e.Because != "" {
		s += " (" + e.Because + ")"
	}
	return s
}

// Checkpoint is an opened checkpoint folder: its config and the headers of its
// safetensors files. No tensor data is read.
type Checkpoint struct {
	// Dir is the checkpoint folder (a local folder or an HF cache snapshot).
	Dir string
	// ModelType is config.json's "model_type".
	ModelType string
	// Config is config.json as parsed JSON (architecture files decode their own structs
	// from ConfigJSON; this map is for generic lookups).
	Config     map[string]any
	ConfigJSON []byte
	// Files are the safetensors files, sorted, as paths.
	Files []string
	// Tensors by name.
	Tensors map[string]*Tensor
	// Metadata is each file's "__metadata__" by file path.
	Metadata map[string]map[string]string
}
