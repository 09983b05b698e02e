package harness

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/xpuinject/xpuinject/models"
)

// Footprint is what an evaluation of a checkpoint holds on its devices, read from the tensor
// index alone (no weights loaded). Byte counts are bf16 unless named fp32.
type Footprint struct {
	// Weights is one bf16 copy of the checkpoint's floating-point tensors: the stock and the
	// injected model hold one each (the packed tensors replace the projections they fold).
	Weights int64
	// Layers is the number of decoder layers (0: a model with no numbered layers), Layer the
	// largest one's bytes.
	Layers int
	Layer  int64
	// First is what the first pipeline stage holds besides its layers (the embeddings), Last
	// what the last one does (final norm and head; the embeddings too when the head is tied to
	// them, as transformers' pipeline keeps them there).
	First, Last int64
	// OracleFloor is the least the layered fp32 oracle holds on the first device: every tensor
	// outside the decoder layers and one decoder layer, in fp32.
	OracleFloor int64
}

var layerName = regexp.MustCompile(`(^|\.)layers\.(\d+)\.`)

// MeasureFootprint sums a checkpoint's tensors by decoder layer and by stage.
func MeasureFootprint(ck *models.Checkpoint) Footprint {
	var fp Footprint
	layers := map[int]int64{}
	var outside, embed int64
	head := false
	for _, t := range ck.Tensors {
		if !isFloat(t.DType) || t.Of != "" { // a view's bytes are its parent's
			continue
		}
		n := 2 * t.Elems()
		fp.Weights += n
		switch m := layerName.FindStringSubmatch(t.Name); {
		case m != nil:
			i, _ := strconv.Atoi(m[2])
			layers[i] += n
		case strings.Contains(t.Name, "embed_tokens."):
			embed += n
			outside += n
		default:
			head = head || strings.HasPrefix(t.Name, "lm_head.")
			outside += n
		}
	}
	for _, n := range layers {
		fp.Layer = max(fp.Layer, n)
	}
	fp.Layers = len(layers)
	fp.First = embed
	fp.Last = outside - embed
	if !head {
		fp.Last += embed
	}
	fp.OracleFloor = 2 * (outside + fp.Layer)
	return fp
}

func isFloat(d models.DType) bool {
	switch d {
	case models.F16, models.BF16, models.F32, models.F64, models.F8E4M3, models.F8E5M2:
		return true
	}
	return false
}

// Headroom is what a device keeps free beyond the weights: activations, the KV cache of the
// generation runs, the allocator's and the runtime's own: a tenth of its memory and 2 GiB.
func Headroom(mem int64) int64 { return mem/10 + 2<<30 }

// PerDevice is what the fullest of n pipeline stages holds: its part of both bf16 models and, on
// the first, the oracle's floor. transformers splits the layers evenly by count and gives the
// last stage the remainder (transformers/distributed/pipeline_parallel.py, layer_range_for_rank).
func (fp Footprint) PerDevice(n int) int64 {
	if n <= 1 || fp.Layers == 0 {
		return 2*fp.Weights + fp.OracleFloor
	}
	per := int64(fp.Layers / n)
	first := 2*(per*fp.Layer+fp.First) + fp.OracleFloor
	last := 2 * ((per+int64(fp.Layers%n))*fp.Layer + fp.Last)
	return max(first, last)
}

// StagesNeeded is the fewest devices, at most len(mem), over which the evaluation fits, each
// holding PerDevice(n) plus Headroom; the devices' memory is taken to be the smallest of mem.
func StagesNeeded(fp Footprint, mem []int64) (int, error) {
	if len(mem) == 0 {
		return 1, nil
	}
	least := mem[0]
	for _, m := range mem {
		least = min(least, m)
	}
	maxStages := len(mem)
	if fp.Layers > 0 {
		maxStages = min(maxStages, fp.Layers)
	}
	for n := 1; n <= maxStages; n++ {
		if fp.PerDevice(n)+Headroom(least) <= least {
			return n, nil
		}
	}
	n := maxStages
	return 0, fmt.Errorf("harness: the evaluation does not fit %d device(s) of %s: two 16-bit copies of the weights (%s each) "+
		"and the fp32 oracle's working set (%s) need %s per device over %d, with %s headroom; use a machine with more "+
		"or larger devices (docs/multi-node.md)", len(mem), GiB(least), GiB(fp.Weights), GiB(fp.OracleFloor),
		GiB(fp.PerDevice(n)), n, GiB(Headroom(least)))
}

// GiB prints a byte count in GiB with one decimal.
func GiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
