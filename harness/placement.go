package harness

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/xpuinject/xpuinject/models"
)

// Footprint is what an evaluation of a checkpoint holds on its devices, read from the tensor
// index alone (no weights loaded).
type Footprint struct {
	// Weights is one bf16 copy of the checkpoint's floating-point tensors: the stock and the
	// injected model hold one each (the packed tensors replace the projections they fold).
	Weights int64
	// LargestLayer is the largest decoder layer in bf16: pipeline stages split at layer
	// boundaries, so a stage may hold up to one layer more than its even share.
	LargestLayer int64
	// OracleFloor is the least the layered fp32 oracle holds on the first device: every tensor
	// outside the decoder layers (embeddings, final norm, head) and one decoder layer, in fp32.
	OracleFloor int64
	// Layers is the number of decoder layers found (0: a model with no numbered layers).
	Layers int
}

var layerName = regexp.MustCompile(`(^|\.)layers\.(\d+)\.`)

// MeasureFootprint sums a checkpoint's tensors by decoder layer.
func MeasureFootprint(ck *models.Checkpoint) Footprint {
	var fp Footprint
	layers := map[int]int64{}
	var outside int64
	for _, t := range ck.Tensors {
		if !isFloat(t.DType) {
			continue
		}
		n := t.Elems()
		fp.Weights += 2 * n
		if m := layerName.FindStringSubmatch(t.Name); m != nil {
			i, _ := strconv.Atoi(m[2])
			layers[i] += n
		} else {
			outside += n
		}
	}
	var largest int64
	for _, n := range layers {
		largest = max(largest, n)
	}
	fp.Layers = len(layers)
	fp.LargestLayer = 2 * largest
	fp.OracleFloor = 4 * (outside + largest)
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

// PerDevice is what the first (fullest) of n pipeline stages holds: its share of both bf16
// models, a layer more for an uneven split, and the oracle's floor.
func (fp Footprint) PerDevice(n int) int64 {
	return 2*(fp.Weights/int64(n)+fp.LargestLayer) + fp.OracleFloor
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
	return 0, fmt.Errorf("harness: the evaluation does not fit %d device(s) of %s: two bf16 copies of the weights (%s each) "+
		"and the fp32 oracle's working set (%s) need %s per device over %d, with %s headroom; use a machine with more "+
		"or larger devices (docs/multi-node.md)", len(mem), GiB(least), GiB(fp.Weights), GiB(fp.OracleFloor),
		GiB(fp.PerDevice(n)), n, GiB(Headroom(least)))
}

// GiB prints a byte count in GiB with one decimal.
func GiB(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
