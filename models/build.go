package models

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
)

// Helpers the architecture files share: config decoding and a layer builder that
// checks every tensor a layer needs and that every tensor belongs to some layer.

var (
	// ErrUnusedTensor: the checkpoint holds a tensor no layer of the architecture owns,
	// so the checkpoint is not what the config says (or the architecture file is wrong).
	ErrUnusedTensor = errors.New("models: tensor belongs to no layer")
	// ErrUnsupportedHead: config.json's "architectures" names a head class we do not map.
	ErrUnsupportedHead = errors.New("models: unsupported model class")
)

// optInt is an integer config field that remembers whether config.json set it and
// whether it set it to null: transformers config classes default a missing field and a
// null one differently (e.g. Qwen2Config: num_key_value_heads missing = 32, null =
// num_attention_heads).
type optInt struct {
	Set, Null bool
	V         int64
}

func (o *optInt) UnmarshalJSON(b []byte) error {
	o.Set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.V)
}

// decodeConfig decodes config.json into cfg, whose fields hold the config class's
// defaults beforehand (json leaves absent fields alone).
func decodeConfig(ck *Checkpoint, cfg any) error {
	if err := json.Unmarshal(ck.ConfigJSON, cfg); err != nil {
		return fmt.Errorf("%w: %s: %s", ErrBadConfig, filepath.Join(ck.Dir, ConfigFile), JSONError(err))
	}
	return nil
}

// configError reports an unusable config value.
func configError(ck *Checkpoint, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadConfig, filepath.Join(ck.Dir, ConfigFile), fmt.Sprintf(format, a...))
}

// need is one tensor a layer owns: its role, checkpoint name, the shape the config
// implies and why. Optional tensors (BatchNorm's num_batches_tracked) may be absent.
type need struct {
	role     string
	name     string
	shape    []int64
	because  string
	optional bool
}

// builder collects layers, stopping at the first error.
type builder struct {
	ck     *Checkpoint
	layers []Layer
	err    error
}

// add appends l after checking each tensor it needs with Checkpoint.Need.
func (b *builder) add(l Layer, needs ...need) {
	if b.err != nil {
		return
	}
	if l.Tensors == nil {
		l.Tensors = map[string]string{}
	}
	for _, n := range needs {
		if n.optional && !b.ck.Has(n.name) {
			continue
		}
		if _, err := b.ck.Need(n.name, n.shape, n.because); err != nil {
			b.err = fmt.Errorf("%w (%s layer %s)", err, b.ck.ModelType, l.Module)
			return
		}
		l.Tensors[n.role] = n.name
	}
	b.layers = append(b.layers, l)
}

// attentionNeeds is a self_attn module's q/k/v/o projections at attn: heads × head_dim
// query rows, kv_heads × head_dim key and value rows, with the q/k/v biases and o_proj's
// where the switches say. hidden names hidden_size for the errors; qWhy and kvWhy say
// what gives the query and the key/value widths, for a caller's own needs beside these.
func attentionNeeds(attn string, h, heads, kv, hd int64, hidden string, qkvBias, oBias bool) (needs []need, qWhy, kvWhy string) {
	qWhy = fmt.Sprintf("num_attention_heads=%d × head_dim=%d, %s", heads, hd, hidden)
	kvWhy = fmt.Sprintf("num_key_value_heads=%d × head_dim=%d, %s", kv, hd, hidden)
	needs = []need{
		{"q_proj.weight", attn + ".q_proj.weight", []int64{heads * hd, h}, qWhy, false},
		{"k_proj.weight", attn + ".k_proj.weight", []int64{kv * hd, h}, kvWhy, false},
		{"v_proj.weight", attn + ".v_proj.weight", []int64{kv * hd, h}, kvWhy, false},
		{"o_proj.weight", attn + ".o_proj.weight", []int64{h, heads * hd}, qWhy, false},
	}
	if qkvBias {
		needs = append(needs,
			need{"q_proj.bias", attn + ".q_proj.bias", []int64{heads * hd}, qWhy, false},
			need{"k_proj.bias", attn + ".k_proj.bias", []int64{kv * hd}, kvWhy, false},
			need{"v_proj.bias", attn + ".v_proj.bias", []int64{kv * hd}, kvWhy, false})
	}
	if oBias {
		needs = append(needs, need{"o_proj.bias", attn + ".o_proj.bias", []int64{h}, hidden, false})
	}
	return needs, qWhy, kvWhy
}

// graph checks that every checkpoint tensor belongs to a layer (except those ignore
// accepts) and returns the graph.
func (b *builder) graph(ignore func(name string) bool) (*Graph, error) {
	if b.err != nil {
		return nil, b.err
	}
	owned := map[string]bool{}
	for _, l := range b.layers {
		for _, name := range l.Tensors {
			owned[name] = true
			if t := b.ck.Tensors[name]; t != nil && t.Of != "" {
				owned[t.Of] = true
			}
		}
	}
	var stray []string
	for name := range b.ck.Tensors {
		if !owned[name] && (ignore == nil || !ignore(name)) {
			stray = append(stray, name)
		}
	}
	if len(stray) > 0 {
		sort.Strings(stray)
		more := ""
		if len(stray) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(stray)-1)
		}
		return nil, fmt.Errorf("%w: %s: tensor %q in %s%s belongs to no %s layer the config describes",
			ErrUnusedTensor, b.ck.Dir, stray[0], filepath.Base(b.ck.Tensors[stray[0]].File), more, b.ck.ModelType)
	}
	return &Graph{Arch: b.ck.ModelType, Checkpoint: b.ck, Layers: b.layers}, nil
}

// mainClass is the first entry of config.json's "architectures", "" when absent.
func mainClass(ck *Checkpoint) string {
	if a, ok := ck.Config["architectures"].([]any); ok && len(a) > 0 {
		if s, ok := a[0].(string); ok {
			return s
		}
	}
	return ""
}

// checkDecoderSizes refuses a decoder config whose sizes cannot describe a model: every count
// positive (layers may be 0) before the architecture checks how they relate.
func checkDecoderSizes(ck *Checkpoint, vocab, hidden, inter, heads, kvHeads, layers int64) error {
	for _, v := range []struct {
		name string
		v    int64
	}{
		{"vocab_size", vocab}, {"hidden_size", hidden}, {"intermediate_size", inter},
		{"num_attention_heads", heads}, {"num_key_value_heads", kvHeads},
	} {
		if v.v <= 0 {
			return configError(ck, "%s is %d, must be positive", v.name, v.v)
		}
	}
	if layers < 0 {
		return configError(ck, "num_hidden_layers is %d", layers)
	}
	return nil
}

// checkDecoderHeads is checkDecoderSizes, then grouped-query attention's rule: every key/value
// head serves the same number of query heads.
func checkDecoderHeads(ck *Checkpoint, vocab, hidden, inter, heads, kvHeads, layers int64) error {
	if err := checkDecoderSizes(ck, vocab, hidden, inter, heads, kvHeads, layers); err != nil {
		return err
	}
	if heads%kvHeads != 0 {
		return configError(ck, "num_attention_heads %d is not a multiple of num_key_value_heads %d", heads, kvHeads)
	}
	return nil
}

// lmHead adds the lm_head layer head (Dims "vocab", "hidden"): its own weight, or with tied the
// embedding emb's, which transformers ties it to (_tied_weights_keys; a checkpoint may still
// carry a copy, which the model ignores). hidden names where the hidden size came from.
func (b *builder) lmHead(head Layer, emb string, tied bool, hidden string) {
	vocab, h := head.Dims["vocab"], head.Dims["hidden"]
	why := fmt.Sprintf("vocab_size=%d, %s", vocab, hidden)
	if tied {
		head.Tied = true
		b.add(head, need{"weight", emb + ".weight", []int64{vocab, h}, why + ", tie_word_embeddings=true", false})
		return
	}
	b.add(head, need{"weight", "lm_head.weight", []int64{vocab, h}, why, false})
}

// checkLayerTypes checks config.json's layer_types (nil: absent): one entry a layer, each
// sliding_attention or full_attention.
// slidingWindow is config.json's sliding_window as a layer's window: 0 where it is null (no
// window), an error naming the field where it is not positive.
func slidingWindow(ck *Checkpoint, w optInt) (int64, error) {
	if w.Null {
		return 0, nil
	}
	if w.V <= 0 {
		return 0, configError(ck, "sliding_window is %d, want a positive window or null", w.V)
	}
	return w.V, nil
}

// layerWindows reads sliding_window (default 4096; null: none) and layer_types, and returns what
// gives each sliding block's attention its window (Dims "sliding_window"): layer_types' sliding
// layers, or, where layer_types is left out, those sliding(i) names (OLMo 3's and Ministral's
// configs).
func layerWindows(ck *Checkpoint, layers int64, sliding func(i int) bool) (func(l *Layer), error) {
	s := struct {
		SlidingWindow optInt   `json:"sliding_window"`
		LayerTypes    []string `json:"layer_types"`
	}{SlidingWindow: optInt{Set: true, V: 4096}}
	if err := decodeConfig(ck, &s); err != nil {
		return nil, err
	}
	window, err := slidingWindow(ck, s.SlidingWindow)
	if err != nil {
		return nil, err
	}
	if err := checkLayerTypes(ck, s.LayerTypes, layers); err != nil {
		return nil, err
	}
	return func(l *Layer) {
		i := l.Block
		if l.Kind != KindAttention || i < 0 || window == 0 {
			return
		}
		if s.LayerTypes != nil && s.LayerTypes[i] == "sliding_attention" || s.LayerTypes == nil && sliding(i) {
			l.Dims["sliding_window"] = window
		}
	}, nil
}

func checkLayerTypes(ck *Checkpoint, types []string, layers int64) error {
	if types != nil && int64(len(types)) != layers {
		return configError(ck, "layer_types has %d entries, num_hidden_layers is %d", len(types), layers)
	}
	for i, t := range types {
		if t != "sliding_attention" && t != "full_attention" {
			return configError(ck, "layer_types[%d] is %q (want sliding_attention or full_attention)", i, t)
		}
	}
	return nil
}
