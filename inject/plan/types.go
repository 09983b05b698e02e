// Package plan turns a models.Graph into a Plan: which kernel replaces which layer, the
// bindings injection carries out, the vendor routes, and how each layer's weights are
// transformed (inject/PLAN.md). It reads and writes plan.yaml and checks a plan against
// its model. Planning is pure: no I/O besides reading a plan file.
//
// Below it: kernels (registry, routes data) and models; above it: pack and emit.
package plan

import "fmt"

// SchemaVersion is the version of the plan.yaml / plan JSON schema written by this build.
// 2: each layer lists its bindings (module -> layer class, attributes read, vendor routes
// with token bounds) instead of a per-layer vendor map. 3: the plan's dtype (outputs cast
// to bf16 or fp16) and the GPU whose measured routes it uses.
const SchemaVersion = 3

// Transform names, as they appear in plans and in safetensors __metadata__.
const (
	TFoldBN        = "fold-bn"        // Linear then BatchNorm1d folded into the Linear
	TFoldBNInput   = "fold-bn-input"  // BatchNorm1d then Linear folded into the Linear
	TFoldConvBN    = "fold-conv-bn"   // Conv2d then BatchNorm2d folded into the Conv2d
	TConcatQKV     = "concat-qkv"     // q, k, v weights (and biases) concatenated along the output dim
	TConcatGateUp  = "concat-gate-up" // gate and up weights concatenated along the output dim
	TCastBF16      = "cast-bf16"      // cast to bf16, round-to-nearest-even
	TCastFP16      = "cast-fp16"      // cast to fp16, round-to-nearest-even (overflow to inf)
	TPrepackKMajor = "prepack-kmajor" // [N, K] nn.Linear weight transposed to K-major [K, N]
	// TAddOne folds Gemma's norm offset: 1 + w, summed exactly and rounded once to F32 (the
	// result stays fp32: in bf16, 1 + w would lose w to the spacing near 1, 2^-7).
	TAddOne = "add-one"
	// TRopeDeinterleave reorders the rotated rows of each q and k head of a concat-qkv
	// output from interleaved pairs (2i, 2i+1) to rotate-half order: even rows, then odd
	// ones. q·k is unchanged, and rotate-half RoPE on the result is the interleaved one.
	TRopeDeinterleave = "rope-deinterleave"
	// TStackExperts stacks one tensor per expert along a new leading dim [experts, ...];
	// the transforms after it apply to each expert's slice (an MoE layer's packed weights).
	TStackExperts = "stack-experts"
)

// The dtypes a model runs in once injected (Plan.DType); DTypeAuto picks one (Options).
const (
	DTypeBF16 = "bf16"
	DTypeFP16 = "fp16"
	DTypeAuto = "auto"
)

// DefaultDType is the dtype of a plan made without --dtype.
const DefaultDType = DTypeBF16

// FileName is the plan's file name in a packed checkpoint and in a package.
const FileName = "plan.yaml"

// KernelKeep is the Kernel value of a layer that stays on the stock transformers path.
const KernelKeep = "keep"

// Plan is the layer -> kernel plan of one model; it is written as plan.yaml by pack
// and read back by package and eval. Field names are the schema (yaml and json agree).
type Plan struct {
	Schema int    `yaml:"schema" json:"schema"`
	Tool   string `yaml:"tool" json:"tool"` // "xpuinject <version>"
	Source Source `yaml:"source" json:"source"`
	Arch   string `yaml:"arch" json:"arch"` // config.json model_type
	// Backends the package targets, e.g. ["cuda", "xpu"].
	Backends []string `yaml:"backends" json:"backends"`
	// DType is what the injected model runs in, "bf16" or "fp16": every output tensor is
	// cast to it, and the model is loaded in it.
	DType string `yaml:"dtype" json:"dtype"`
	// GPU names the measured data (kernels' gpus/<gpu>.json) the vendor routes come from;
	// a GPU without data has none.
	GPU string `yaml:"gpu" json:"gpu"`
	// Disable lists the kernels planning was told not to use (--disable), sorted; with
	// the model it is all that re-planning needs to give the same plan.
	Disable []string    `yaml:"disable,omitempty" json:"disable,omitempty"`
	Layers  []LayerPlan `yaml:"layers" json:"layers"`
}

// Source says where the checkpoint came from.
type Source struct {
	Repo     string `yaml:"repo,omitempty" json:"repo,omitempty"`         // org/name on the Hub
	Revision string `yaml:"revision,omitempty" json:"revision,omitempty"` // commit sha
	Path     string `yaml:"path,omitempty" json:"path,omitempty"`         // local folder
}

// LayerPlan is the decision for one layer.
type LayerPlan struct {
	Module string `yaml:"module" json:"module"` // transformers module path
	Kind   string `yaml:"kind" json:"kind"`     // models.LayerKind
	Class  string `yaml:"class" json:"class"`   // transformers class name
	// Kernel is the registry name of the replacing kernel, or "keep".
	Kernel string `yaml:"kernel" json:"kernel"`
	// Layer is the kernel-hub layer class that replaces the module's forward ("" when
	// kept; a kept conv-bn still runs ConvBN on its folded weights).
	Layer string `yaml:"layer,omitempty" json:"layer,omitempty"`
	// Reason explains a keep (and, for replaced layers, any notable choice).
	Reason string `yaml:"reason,omitempty" json:"reason,omitempty"`
	// Transforms applied to this layer's weights, in order.
	Transforms []string `yaml:"transforms,omitempty" json:"transforms,omitempty"`
	// Tensors maps the layer's roles to source checkpoint tensor names.
	Tensors map[string]string `yaml:"tensors" json:"tensors"`
	// Dims are the shape facts of the layer (hidden, heads, ...).
	Dims map[string]int64 `yaml:"dims,omitempty" json:"dims,omitempty"`
	Eps  float64          `yaml:"eps,omitempty" json:"eps,omitempty"`
	// Router is an MoE layer's routing rule (models.RouterSoftmaxTopK, ...).
	Router string `yaml:"router,omitempty" json:"router,omitempty"`
	// Bindings are every module whose forward the package replaces for this layer: the
	// layer's own module, and the modules a fusion or delegation adds (the decoder layer
	// of a fused add+RMSNorm, qwen3's q/k norms). Injection carries out exactly these.
	Bindings []Binding `yaml:"bindings,omitempty" json:"bindings,omitempty"`
	// Outputs are the tensors pack writes for this layer.
	Outputs []TensorPlan `yaml:"outputs,omitempty" json:"outputs,omitempty"`
}

// Binding is one module whose forward the package's layer class replaces.
type Binding struct {
	Module string `yaml:"module" json:"module"` // transformers module path
	Class  string `yaml:"class" json:"class"`   // the class the module must be
	Layer  string `yaml:"layer" json:"layer"`   // kernel-hub layer class bound to it
	// Reads are the module attributes the layer reads (contract.json's, then the packed
	// tensors the layer's outputs attach, then the children it calls); dotted names are a
	// child's attribute.
	Reads []string `yaml:"reads,omitempty" json:"reads,omitempty"`
	// Vendor lists sub-operations that run on the vendor path (cuBLAS, SDPA) because a
	// measurement showed it faster for this module's shapes.
	Vendor []VendorRoute `yaml:"vendor,omitempty" json:"vendor,omitempty"`
}

// VendorRoute sends one sub-operation to the vendor path for calls of MinTokens to
// MaxTokens tokens (0 leaves that side open; attention routes have no bounds).
type VendorRoute struct {
	// Op is a GEMM name (qkv_proj, o_proj, gate_up_proj, down_proj), attention-prefill
	// or attention-decode.
	Op        string `yaml:"op" json:"op"`
	MinTokens int64  `yaml:"min_tokens,omitempty" json:"min_tokens,omitempty"`
	MaxTokens int64  `yaml:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	// Reason is the measurement behind the route.
	Reason string `yaml:"reason" json:"reason"`
}

// TensorPlan describes one tensor of the packed checkpoint.
type TensorPlan struct {
	Name string `yaml:"name" json:"name"`
	// Role is "weight" or "bias": which half of a fold the tensor is (see PLAN.md).
	Role string `yaml:"role,omitempty" json:"role,omitempty"`
	// Attr is the module attribute injection attaches the tensor as
	// (e.g. "xpuinject_qkv_weight"), "" for tensors loaded under their own name.
	Attr       string   `yaml:"attr,omitempty" json:"attr,omitempty"`
	Sources    []string `yaml:"sources" json:"sources"`
	Transforms []string `yaml:"transforms,omitempty" json:"transforms,omitempty"`
	Shape      []int64  `yaml:"shape" json:"shape"`
	DType      string   `yaml:"dtype" json:"dtype"`   // safetensors dtype of the output
	Layout     string   `yaml:"layout" json:"layout"` // "row-major" or "k-major"
	// Split gives the sizes along the concatenated (output) dimension, in source order.
	Split []int64 `yaml:"split,omitempty" json:"split,omitempty"`
}

// Counts are a plan's modules (its layers, one per plan row) by what runs them, the layer
// bindings they make and the tensors pack writes; the CLI, the package card and the eval
// report all count this way.
type Counts struct {
	Layers int // modules the plan lists
	Kernel int // replaced by one of our kernels
	Folded int // a stock op on folded weights through a binding (a kept conv-bn: ConvBN)
	Kept   int // the stock module on its own weights: no binding
	// Bindings are the modules given a layer class; a fused add-RMSNorm also binds its
	// decoder layer, so there can be more than Kernel+Folded.
	Bindings int
	// Tensors are the tensors pack writes; KeptTensors of them are kept modules' own
	// weights, cast to the plan's dtype, which injection leaves to the model's copy.
	Tensors, KeptTensors int
}

// Counts counts p's modules, bindings and tensors.
func (p *Plan) Counts() Counts {
	c := Counts{Layers: len(p.Layers)}
	for _, l := range p.Layers {
		switch {
		case l.Kernel != KernelKeep:
			c.Kernel++
		case len(l.Bindings) > 0:
			c.Folded++
		default:
			c.Kept++
			c.KeptTensors += len(l.Outputs)
		}
		c.Bindings += len(l.Bindings)
		c.Tensors += len(l.Outputs)
	}
	return c
}

// String is "33 modules: 18 on our kernels, 4 on stock ops with folded weights, 11 kept;
// 26 layer bindings; packs 40 tensors (11 of kept modules)".
func (c Counts) String() string {
	s := fmt.Sprintf("%d modules: %d on our kernels", c.Layers, c.Kernel)
	if c.Folded > 0 {
		s += fmt.Sprintf(", %d on stock ops with folded weights", c.Folded)
	}
	return s + fmt.Sprintf(", %d kept; %d layer bindings; packs %s", c.Kept, c.Bindings, c.TensorsString())
}

// TensorsString is "40 tensors (11 of kept modules)", as pack reports them.
func (c Counts) TensorsString() string {
	s := fmt.Sprintf("%d tensors", c.Tensors)
	if c.KeptTensors > 0 {
		s += fmt.Sprintf(" (%d of kept modules)", c.KeptTensors)
	}
	return s
}
