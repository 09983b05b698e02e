package kernels

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// ContractFile is the file inside Sources that holds the names and bounds the planner,
// the Python layers and injection share (contract.py reads the same bytes).
const ContractFile = "contract.json"

// Contract is contract.json: one definition of the names and bounds Go and Python share.
type Contract struct {
	// DecodeMaxTokens is the largest token count a decode-only vendor route covers.
	DecodeMaxTokens int64 `json:"decode_max_tokens"`
	// ShortMaxTokens is the largest token count a short-prefill vendor route covers (a
	// chunk of prompt past decode size, where a tiled GEMM's tiles are mostly empty rows).
	ShortMaxTokens int64 `json:"short_max_tokens"`
	// MinGEMMDim is the smallest K and N the planner gives the gemm kernel.
	MinGEMMDim int64 `json:"min_gemm_dim"`
	// AttentionHeadDims are the head_dim values the attention kernels accept.
	AttentionHeadDims []int64 `json:"attention_head_dims"`
	// GEMMEpilogues are the epilogues the gemm kernel fuses.
	GEMMEpilogues []string `json:"gemm_epilogues"`
	// ModuleAttrs names the attributes injection sets on a module: "name" (its path, for
	// errors) and "vendor" (its vendor routes).
	ModuleAttrs map[string]string `json:"module_attrs"`
	// Layers describes each kernel-hub layer class.
	Layers map[string]LayerContract `json:"layers"`
	// DefaultGPU is the GPU whose data (gpus/<name>.json) a plan uses when none is named.
	DefaultGPU string `json:"default_gpu"`
	// PackedChecks are what a packed checkpoint must satisfy before it is used, in the
	// order they are checked: the CLI's pre-flight (inject/emit, CheckPacked) and the
	// package's inject(model, packed=...) (injection.py) each implement every one.
	PackedChecks []PackedCheck `json:"packed_checks"`
	// InterleavedRotary lists the attention classes whose RoPE rotates adjacent channel
	// pairs; their q and k rows are packed in rotate-half order (rope-deinterleave).
	InterleavedRotary struct {
		Classes []string `json:"classes"`
	} `json:"interleaved_rotary"`
	// GlobalNoPE lists the attention classes that keep config.sliding_window on every layer and
	// name their sliding ones by is_sliding; with a window set, the others skip RoPE.
	GlobalNoPE struct {
		Classes []string `json:"classes"`
	} `json:"global_nope"`
	// QKNormsAfterRope lists the attention classes whose per-head q/k norms (Modules: the
	// query's, the key's) normalize the rotated heads, after RoPE.
	QKNormsAfterRope struct {
		Classes []string `json:"classes"`
		Modules []string `json:"modules"`
	} `json:"qk_norms_after_rope"`
}

// PackedCheck is one property of a packed checkpoint.
type PackedCheck struct {
	Name string `json:"name"`
	What string `json:"what"`
}

// LayerContract is what one layer class reads from the module it is bound to.
type LayerContract struct {
	// Classes are the transformers classes whose forward it replaces.
	Classes []string `json:"classes"`
	// Reads are the module attributes it reads besides its packed tensors (dotted for a
	// child's attribute: "convolution.stride").
	Reads []string `json:"reads"`
	// Packed maps a packed tensor's role ("qkv_weight") to the attribute it lives in.
	Packed map[string]string `json:"packed"`
	// Sources are the children the packed tensors are made from: the layer packs from
	// them when the packed tensors are absent, and injection releases them after loading
	// offline-packed ones.
	Sources []string `json:"sources"`
}

var contract = mustParseContract()

// TheContract returns the embedded contract.json (a copy: callers may not change it).
func TheContract() Contract {
	c := contract
	c.AttentionHeadDims = slices.Clone(c.AttentionHeadDims)
	c.GEMMEpilogues = slices.Clone(c.GEMMEpilogues)
	c.PackedChecks = slices.Clone(c.PackedChecks)
	return c
}

func mustParseContract() Contract {
	b, err := Sources.ReadFile(SourceDir + "/" + ContractFile)
	if err != nil {
		panic("kernels: embedded " + ContractFile + " unreadable: " + err.Error()) // compiled in
	}
	c, err := ParseContract(b)
	if err != nil {
		panic(err) // the embedded file is checked by contract_test.go
	}
	return c
}

// ParseContract reads contract.json and checks that every field the planner uses is set.
func ParseContract(b []byte) (Contract, error) {
	var c Contract
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("kernels: %s: %w", ContractFile, err)
	}
	switch {
	case c.DecodeMaxTokens < 1:
		return c, fmt.Errorf("kernels: %s: decode_max_tokens %d < 1", ContractFile, c.DecodeMaxTokens)
	case c.ShortMaxTokens <= c.DecodeMaxTokens:
		return c, fmt.Errorf("kernels: %s: short_max_tokens %d is not above decode_max_tokens %d", ContractFile,
			c.ShortMaxTokens, c.DecodeMaxTokens)
	case c.MinGEMMDim < 1:
		return c, fmt.Errorf("kernels: %s: min_gemm_dim %d < 1", ContractFile, c.MinGEMMDim)
	case len(c.AttentionHeadDims) == 0 || len(c.GEMMEpilogues) == 0:
		return c, fmt.Errorf("kernels: %s: attention_head_dims and gemm_epilogues must not be empty", ContractFile)
	case c.ModuleAttrs["name"] == "" || c.ModuleAttrs["vendor"] == "":
		return c, fmt.Errorf("kernels: %s: module_attrs needs name and vendor", ContractFile)
	case len(c.Layers) == 0:
		return c, fmt.Errorf("kernels: %s: no layers", ContractFile)
	case !gpuName.MatchString(c.DefaultGPU):
		return c, fmt.Errorf("kernels: %s: default_gpu %q: want a GPU name (lowercase letters, digits, dashes)", ContractFile, c.DefaultGPU)
	}
	for name, l := range c.Layers {
		for role, attr := range l.Packed {
			if role == "" || attr == "" {
				return c, fmt.Errorf("kernels: %s: layer %s: packed role %q -> attribute %q", ContractFile, name, role, attr)
			}
		}
	}
	if len(c.PackedChecks) == 0 {
		return c, fmt.Errorf("kernels: %s: no packed_checks", ContractFile)
	}
	return c, nil
}

// PackedAttr is the attribute layer's packed tensor of role lives in
// (PackedAttr("Attention", "qkv_weight") = "xpuinject_qkv_weight"). It panics on a name
// the contract lacks: callers pass constants, and contract_test.go checks every one.
func PackedAttr(layer, role string) string {
	a := contract.Layers[layer].Packed[role]
	if a == "" {
		panic(fmt.Sprintf("kernels: %s has no packed tensor %q for layer %s", ContractFile, role, layer))
	}
	return a
}

// LayerReads are the attributes layer reads besides its packed tensors.
func LayerReads(layer string) []string { return slices.Clone(contract.Layers[layer].Reads) }

// LayerNames lists the contract's layer classes, sorted.
func LayerNames() []string {
	out := make([]string, 0, len(contract.Layers))
	for n := range contract.Layers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LayerReplaces reports whether layer may replace the forward of a transformers class.
func LayerReplaces(layer, class string) bool {
	l, ok := contract.Layers[layer]
	return ok && slices.Contains(l.Classes, class)
}

// RotatesInterleaved reports whether the attention class rotates adjacent channel pairs,
// so the package reorders its q and k rows when it packs them on the device.
func RotatesInterleaved(class string) bool {
	return slices.Contains(contract.InterleavedRotary.Classes, class)
}

// QKNormsAfterRope reports whether an attention class normalizes its rotated q and k heads
// (contract.json qk_norms_after_rope: HunYuan's), so the package's RoPE launch runs its q/k norms
// after the rotation.
func QKNormsAfterRope(class string) bool {
	return slices.Contains(contract.QKNormsAfterRope.Classes, class)
}

// GlobalNoPE reports whether an attention class tells its NoPE layers by sliding_window and
// is_sliding (contract.json global_nope: EXAONE 4's) rather than by a use_rope switch.
func GlobalNoPE(class string) bool {
	return slices.Contains(contract.GlobalNoPE.Classes, class)
}
