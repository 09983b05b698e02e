package models

import (
	"encoding/json"
	"fmt"
)

// LeViT (model_type "levit"). Read against transformers 5.17
// models/levit/{configuration,modeling}_levit.py. Module tree of
// LevitForImageClassificationWithTeacher (prefix "levit." for the classification
// classes, none for the bare LevitModel):
//
//	patch_embeddings.embedding_layer_{1..4}         conv-bn     LevitConvEmbeddings (convolution + batch_norm)
//	encoder.stages.s.layers.j.module                attention   LevitAttention (attention_biases)
//	  .queries_keys_values, .projection             linear-bn   MLPLayerWithBN (linear + batch_norm)
//	encoder.stages.s.layers.j.module.linear_up/down linear-bn   MLPLayerWithBN (inside LevitMLPLayer)
//	encoder.stages.s.layers.j                       attention   LevitAttentionSubsample (attention_biases; not
//	  .keys_values, .queries, .projection           linear-bn   wrapped in a residual, hence no ".module")
//	classifier, classifier_distill                  bn-linear   LevitClassificationLayer (batch_norm + linear)
//
// LeViT's attention itself has no kernel; its layer exists so that attention_biases
// belongs to a layer the plan can keep with a reason. Roles: conv-bn "conv.weight";
// linear-bn and bn-linear "linear.weight" ("linear.bias" for bn-linear); all three
// "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var" and, when the checkpoint
// has it, "bn.num_batches_tracked"; attention "attention_biases".
//
// BatchNorm eps is not in the config: every BatchNorm here is built with torch's
// default eps 1e-5, which Layer.Eps records.
//
// Dims: conv-bn "in", "out", "kernel", "stride", "padding"; linear-bn and bn-linear
// "in", "out"; attention "hidden" (input width), "out", "heads", "key_dim",
// "attention_ratio", "resolution", "resolution_out", "stride" (subsample only). Encoder
// layers also carry "stage". Block numbers the encoder's residual/subsample entries
// across stages in order; embeddings and classifiers have Block -1.

const batchNormEps = 1e-5 // torch.nn.BatchNorm{1,2}d default; LevitConfig has no eps

// levitConfig is LevitConfig's weight-shaping fields with the class defaults.
type levitConfig struct {
	ImageSize         int64             `json:"image_size"`
	NumChannels       int64             `json:"num_channels"`
	KernelSize        int64             `json:"kernel_size"`
	Stride            int64             `json:"stride"`
	Padding           int64             `json:"padding"`
	PatchSize         int64             `json:"patch_size"`
	HiddenSizes       []int64           `json:"hidden_sizes"`
	NumAttentionHeads []int64           `json:"num_attention_heads"`
	Depths            []int64           `json:"depths"`
	KeyDim            []int64           `json:"key_dim"`
	MLPRatio          []int64           `json:"mlp_ratio"`
	AttentionRatio    []int64           `json:"attention_ratio"`
	DownOps           []json.RawMessage `json:"down_ops"`
	ID2Label          map[string]any    `json:"id2label"`
	NumLabels         *int64            `json:"num_labels"`
}

// downOp is one entry of LevitConfig.down_ops: ["Subsample", key_dim, heads,
// attention_ratio, mlp_ratio, stride], or anything else for "no subsample".
type downOp struct {
	subsample                                  bool
	keyDim, heads, attnRatio, mlpRatio, stride int64
}

func init() {
	Register(Architecture{ModelTypes: []string{"levit"}, Build: buildLevit})
}

func levitDefaults() levitConfig {
	return levitConfig{
		ImageSize: 224, NumChannels: 3, KernelSize: 3, Stride: 2, Padding: 1, PatchSize: 16,
		HiddenSizes: []int64{128, 256, 384}, NumAttentionHeads: []int64{4, 8, 12},
		Depths: []int64{4, 4, 4}, KeyDim: []int64{16, 16, 16}, MLPRatio: []int64{2, 2, 2},
		AttentionRatio: []int64{2, 2, 2},
	}
}

func (c *levitConfig) validate(ck *Checkpoint) ([]downOp, error) {
	for _, v := range []struct {
		name string
		v    int64
	}{{"image_size", c.ImageSize}, {"num_channels", c.NumChannels}, {"kernel_size", c.KernelSize},
		{"stride", c.Stride}, {"patch_size", c.PatchSize}} {
		if v.v <= 0 {
			return nil, configError(ck, "%s is %d, must be positive", v.name, v.v)
		}
	}
	n := len(c.Depths)
	if n == 0 {
		return nil, configError(ck, "depths is empty")
	}
	for _, l := range []struct {
		name string
		v    []int64
	}{{"hidden_sizes", c.HiddenSizes}, {"num_attention_heads", c.NumAttentionHeads}, {"key_dim", c.KeyDim},
		{"mlp_ratio", c.MLPRatio}, {"attention_ratio", c.AttentionRatio}} {
		if len(l.v) < n {
			return nil, configError(ck, "%s has %d entries, depths has %d", l.name, len(l.v), n)
		}
		for _, v := range l.v {
			if v < 0 || (v == 0 && l.name != "mlp_ratio") {
				return nil, configError(ck, "%s %v: entries must be positive", l.name, l.v)
			}
		}
	}
	for _, d := range c.Depths {
		if d < 0 {
			return nil, configError(ck, "depths %v: negative depth", c.Depths)
		}
	}
	if res := c.ImageSize / c.PatchSize; res > 1<<12 {
		return nil, configError(ck, "image_size/patch_size = %d is implausibly large", res)
	}
	// down_ops: LevitConfig.__post_init__ derives it from key_dim[0] and hidden_sizes,
	// but a down_ops saved in config.json wins (it arrives as a kwarg applied after).
	var ops []downOp
	if c.DownOps == nil {
		for i := 0; i < 2 && i < n; i++ {
			if c.KeyDim[0] == 0 {
				break
			}
			ops = append(ops, downOp{subsample: true, keyDim: c.KeyDim[0], heads: c.HiddenSizes[i] / c.KeyDim[0],
				attnRatio: 4, mlpRatio: 2, stride: 2})
		}
	} else {
		for i, raw := range c.DownOps {
			var entry []any
			if err := json.Unmarshal(raw, &entry); err != nil {
				return nil, configError(ck, "down_ops[%d]: %s", i, JSONError(err))
			}
			if len(entry) == 0 || entry[0] != "Subsample" {
				ops = append(ops, downOp{})
				continue
			}
			if len(entry) < 6 {
				return nil, configError(ck, "down_ops[%d] %v: want [\"Subsample\", key_dim, heads, attention_ratio, mlp_ratio, stride]", i, entry)
			}
			var v [5]int64
			for k := range v {
				f, ok := entry[k+1].(float64)
				if !ok || f != float64(int64(f)) || f < 0 || f > 1<<20 {
					return nil, configError(ck, "down_ops[%d][%d] = %v: want a small non-negative integer", i, k+1, entry[k+1])
				}
				v[k] = int64(f)
			}
			op := downOp{subsample: true, keyDim: v[0], heads: v[1], attnRatio: v[2], mlpRatio: v[3], stride: v[4]}
			if op.keyDim == 0 || op.heads == 0 || op.attnRatio == 0 || op.stride == 0 {
				return nil, configError(ck, "down_ops[%d] %v: key_dim, heads, attention_ratio and stride must be positive", i, entry)
			}
			ops = append(ops, op)
		}
	}
	for len(ops) < n {
		ops = append(ops, downOp{}) // LevitEncoder appends [""]: no subsample
	}
	for s := 0; s < n; s++ {
		if ops[s].subsample && s+1 >= len(c.HiddenSizes) {
			return nil, configError(ck, "stage %d subsamples into hidden_sizes[%d], but hidden_sizes has %d entries",
				s, s+1, len(c.HiddenSizes))
		}
	}
	return ops, nil
}

// levitNumLabels is PreTrainedConfig.num_labels: the size of id2label when saved, else
// num_labels, else the default 2.
func (c *levitConfig) numLabels() int64 {
	switch {
	case c.ID2Label != nil:
		return int64(len(c.ID2Label))
	case c.NumLabels != nil:
		return *c.NumLabels
	}
	return 2
}

// biasOffsets counts the distinct (|dx|, |dy|) offsets between query points on a
// resOut×resOut grid (strided by stride) and key points on a resIn×resIn grid: the
// second dimension of attention_biases (LevitAttention with stride 1 and resOut = resIn,
// LevitAttentionSubsample otherwise). x and y range alike, so it is the square of the
// number of distinct |dx|.
func biasOffsets(resIn, resOut, stride int64) int64 {
	seen := map[int64]bool{}
	for a := int64(0); a < resOut; a++ {
		for b := int64(0); b < resIn; b++ {
			d := a*stride - b
			if d < 0 {
				d = -d
			}
			seen[d] = true
		}
	}
	n := int64(len(seen))
	return n * n
}

func buildLevit(ck *Checkpoint) (*Graph, error) {
	c := levitDefaults()
	if err := decodeConfig(ck, &c); err != nil {
		return nil, err
	}
	ops, err := c.validate(ck)
	if err != nil {
		return nil, err
	}
	prefix, heads := "levit.", []string{"classifier", "classifier_distill"}
	switch cls := mainClass(ck); cls {
	case "LevitForImageClassificationWithTeacher":
	case "LevitForImageClassification":
		heads = heads[:1]
	case "LevitModel":
		prefix, heads = "", nil
	case "":
		// No "architectures": go by the tensors present.
		if !ck.Has("levit.patch_embeddings.embedding_layer_1.convolution.weight") {
			prefix, heads = "", nil
		} else if !ck.Has("classifier_distill.linear.weight") {
			heads = heads[:1]
		}
	default:
		return nil, fmt.Errorf("%w: %s: %q (supported: LevitForImageClassificationWithTeacher, LevitForImageClassification, LevitModel)",
			ErrUnsupportedHead, ck.Dir, cls)
	}
	labels := c.numLabels()
	if labels == 0 {
		heads = nil // num_labels 0: the classifiers are nn.Identity
	}
	b := &builder{ck: ck}

	bnNeeds := func(module, bn string, ch int64, why string) []need {
		return []need{
			{"bn.weight", module + "." + bn + ".weight", []int64{ch}, why, false},
			{"bn.bias", module + "." + bn + ".bias", []int64{ch}, why, false},
			{"bn.running_mean", module + "." + bn + ".running_mean", []int64{ch}, why, false},
			{"bn.running_var", module + "." + bn + ".running_var", []int64{ch}, why, false},
			{"bn.num_batches_tracked", module + "." + bn + ".num_batches_tracked", []int64{}, "a BatchNorm counter", true},
		}
	}

	// Patch embeddings: four conv-bn, channels num_channels → h0/8 → h0/4 → h0/2 → h0.
	h0 := c.HiddenSizes[0]
	chans := []int64{c.NumChannels, h0 / 8, h0 / 4, h0 / 2, h0}
	for i := 1; i <= 4; i++ {
		m := fmt.Sprintf("%spatch_embeddings.embedding_layer_%d", prefix, i)
		in, out := chans[i-1], chans[i]
		why := fmt.Sprintf("hidden_sizes[0]=%d, num_channels=%d, kernel_size=%d", h0, c.NumChannels, c.KernelSize)
		needs := append([]need{{"conv.weight", m + ".convolution.weight", []int64{out, in, c.KernelSize, c.KernelSize}, why, false}},
			bnNeeds(m, "batch_norm", out, why)...)
		b.add(Layer{Module: m, Kind: KindConvBN, Class: "LevitConvEmbeddings", Eps: batchNormEps, Block: -1,
			Dims: map[string]int64{"in": in, "out": out, "kernel": c.KernelSize, "stride": c.Stride, "padding": c.Padding}},
			needs...)
	}

	block := 0
	linearBN := func(m string, in, out int64, stage int, why string) {
		needs := append([]need{{"linear.weight", m + ".linear.weight", []int64{out, in}, why, false}},
			bnNeeds(m, "batch_norm", out, why)...)
		b.add(Layer{Module: m, Kind: KindLinearBN, Class: "MLPLayerWithBN", Eps: batchNormEps, Block: block,
			Dims: map[string]int64{"in": in, "out": out, "stage": int64(stage)}}, needs...)
	}
	mlp := func(m string, h, ratio int64, stage int) {
		why := fmt.Sprintf("hidden size %d × mlp ratio %d (stage %d)", h, ratio, stage)
		linearBN(m+".linear_up", h, h*ratio, stage, why)
		linearBN(m+".linear_down", h*ratio, h, stage, why)
	}

	res := c.ImageSize / c.PatchSize
	for s := 0; s < len(c.Depths) && b.err == nil; s++ {
		h, kd, nh, ar, mr := c.HiddenSizes[s], c.KeyDim[s], c.NumAttentionHeads[s], c.AttentionRatio[s], c.MLPRatio[s]
		stage := fmt.Sprintf("%sencoder.stages.%d.layers", prefix, s)
		j := 0
		for d := int64(0); d < c.Depths[s] && b.err == nil; d++ {
			m := fmt.Sprintf("%s.%d.module", stage, j)
			why := fmt.Sprintf("stage %d: hidden_sizes=%d, key_dim=%d, num_attention_heads=%d, attention_ratio=%d", s, h, kd, nh, ar)
			b.add(Layer{Module: m, Kind: KindAttention, Class: "LevitAttention", Block: block,
				Dims: map[string]int64{"hidden": h, "out": h, "heads": nh, "key_dim": kd, "attention_ratio": ar,
					"resolution": res, "resolution_out": res, "stage": int64(s)}},
				need{"attention_biases", m + ".attention_biases", []int64{nh, biasOffsets(res, res, 1)},
					why + fmt.Sprintf(", resolution=%d", res), false})
			linearBN(m+".queries_keys_values", h, ar*kd*nh+2*kd*nh, s, why)
			linearBN(m+".projection", ar*kd*nh, h, s, why)
			j++
			block++
			if mr > 0 {
				mlp(fmt.Sprintf("%s.%d.module", stage, j), h, mr, s)
				j++
				block++
			}
		}
		op := ops[s]
		if !op.subsample || b.err != nil {
			continue
		}
		out := c.HiddenSizes[s+1]
		resOut := (res-1)/op.stride + 1
		m := fmt.Sprintf("%s.%d", stage, j)
		why := fmt.Sprintf("stage %d down_ops: key_dim=%d, heads=%d, attention_ratio=%d; hidden_sizes %d → %d",
			s, op.keyDim, op.heads, op.attnRatio, h, out)
		b.add(Layer{Module: m, Kind: KindAttention, Class: "LevitAttentionSubsample", Block: block,
			Dims: map[string]int64{"hidden": h, "out": out, "heads": op.heads, "key_dim": op.keyDim,
				"attention_ratio": op.attnRatio, "resolution": res, "resolution_out": resOut, "stride": op.stride,
				"stage": int64(s)}},
			need{"attention_biases", m + ".attention_biases", []int64{op.heads, biasOffsets(res, resOut, op.stride)},
				why + fmt.Sprintf(", resolution %d → %d", res, resOut), false})
		linearBN(m+".keys_values", h, op.attnRatio*op.keyDim*op.heads+op.keyDim*op.heads, s, why)
		linearBN(m+".queries", h, op.keyDim*op.heads, s, why)
		linearBN(m+".projection", op.attnRatio*op.keyDim*op.heads, out, s, why)
		j++
		block++
		res = resOut
		if op.mlpRatio > 0 {
			mlp(fmt.Sprintf("%s.%d.module", stage, j), out, op.mlpRatio, s)
			j++
			block++
		}
	}

	last := c.HiddenSizes[len(c.HiddenSizes)-1] // LevitClassificationLayer(config.hidden_sizes[-1], ...)
	for _, m := range heads {
		why := fmt.Sprintf("hidden_sizes[-1]=%d, num_labels=%d", last, labels)
		needs := append(bnNeeds(m, "batch_norm", last, why),
			need{"linear.weight", m + ".linear.weight", []int64{labels, last}, why, false},
			need{"linear.bias", m + ".linear.bias", []int64{labels}, why, false})
		b.add(Layer{Module: m, Kind: KindBNLinear, Class: "LevitClassificationLayer", Eps: batchNormEps, Bias: true,
			Block: -1, Dims: map[string]int64{"in": last, "out": labels}}, needs...)
	}
	return b.graph(nil)
}
