package pack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// moeCase is an MoE layer's per-expert tensors (F32, so the plan casts them) and the plan
// stacking them as the planner does: gate_up [E, H, 2I] and down [E, I, H], K-major.
func moeCase(t *testing.T, dir string, experts, hidden, inter int64) (*models.Checkpoint, *plan.Plan, [][3]*stensor) {
	var ts []*stensor
	var ex [][3]*stensor
	var gu, dn []string
	for e := int64(0); e < experts; e++ {
		pre := fmt.Sprintf("m.experts.%d.", e)
		g := mkTensor(pre+"gate_proj.weight", models.F32, []int64{inter, hidden}, randGen(uint64(10+e), -1, 1))
		u := mkTensor(pre+"up_proj.weight", models.F32, []int64{inter, hidden}, randGen(uint64(50+e), -1, 1))
		d := mkTensor(pre+"down_proj.weight", models.F32, []int64{hidden, inter}, randGen(uint64(90+e), -1, 1))
		ts = append(ts, g, u, d)
		ex = append(ex, [3]*stensor{g, u, d})
		gu = append(gu, g.name, u.name)
		dn = append(dn, d.name)
	}
	ck := writeCheckpoint(t, dir, ts)
	kt := []string{plan.TStackExperts, plan.TConcatGateUp, plan.TCastBF16, plan.TPrepackKMajor}
	pl := &plan.Plan{Schema: plan.SchemaVersion, Arch: "test", DType: plan.DTypeBF16, Layers: []plan.LayerPlan{{
		Module: "m", Kind: string(models.KindMoE), Kernel: "moe", Outputs: []plan.TensorPlan{
			{Name: "m.gate_up_proj.weight", Sources: gu, Transforms: kt, Shape: []int64{experts, hidden, 2 * inter},
				DType: "BF16", Layout: plan.LayoutKMajor, Split: []int64{inter, inter}},
			{Name: "m.down_proj.weight", Sources: dn, Transforms: []string{plan.TStackExperts, plan.TCastBF16, plan.TPrepackKMajor},
				Shape: []int64{experts, inter, hidden}, DType: "BF16", Layout: plan.LayoutKMajor},
		}}}}
	return ck, pl, ex
}

// TestPackStacksExperts: each expert's gate and up concatenated along the output dim and
// transposed, the experts one after another, matching a reference built element by element;
// with tiny blocks too, so a slice spans many row blocks.
func TestPackStacksExperts(t *testing.T) {
	for _, bb := range []int64{1 << 20, 64} {
		t.Run(fmt.Sprintf("block%d", bb), func(t *testing.T) {
			old := packBlockBytes
			packBlockBytes = bb
			defer func() { packBlockBytes = old }()
			dir := t.TempDir()
			const experts, hidden, inter = 3, 24, 40
			ck, pl, ex := moeCase(t, filepath.Join(dir, "src"), experts, hidden, inter)
			out := filepath.Join(dir, "out")
			if _, err := Write(context.Background(), ck, pl, out, Options{Tool: "xpuinject test", Workers: 2}); err != nil {
				t.Fatal(err)
			}
			got, _ := readPacked(t, out)
			var wantGU, wantDown []uint16
			for _, e := range ex {
				// [gate; up] is [2I, H]; K-major is its transpose [H, 2I].
				cat := append(append([]float64{}, e[0].vals...), e[1].vals...)
				wantGU = append(wantGU, refT(refCast(cat), 2*inter, hidden)...)
				wantDown = append(wantDown, refT(refCast(e[2].vals), hidden, inter)...)
			}
			wantU16(t, "m.gate_up_proj.weight", bf16Vals(got["m.gate_up_proj.weight"].data), wantGU)
			wantU16(t, "m.down_proj.weight", bf16Vals(got["m.down_proj.weight"].data), wantDown)
			if s := got["m.gate_up_proj.weight"].t.Shape; fmt.Sprint(s) != "[3 24 80]" {
				t.Errorf("gate_up shape %v", s)
			}
		})
	}
}

// TestPackStackBounded: the K-major buffer is one expert's slice, not the stacked tensor.
func TestPackStackBounded(t *testing.T) {
	ck, pl, _ := moeCase(t, t.TempDir(), 4, 16, 32)
	rs, err := planRecipes(ck, pl)
	if err != nil {
		t.Fatal(err)
	}
	if got, slice := maxKMajor(rs), int64(16*64*2); got != slice {
		t.Errorf("K-major buffer %d bytes, want one expert's gate_up slice (%d)", got, slice)
	}
}

func TestPackStackBadPlans(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(o *plan.TensorPlan)
		want string
	}{
		{"sources not per expert", func(o *plan.TensorPlan) { o.Sources = o.Sources[:5] }, "do not split into one group each"},
		{"no expert dim", func(o *plan.TensorPlan) { o.Shape = []int64{24} }, "wants a shape [experts, ...]"},
		{"wrong slice shape", func(o *plan.TensorPlan) { o.Shape = []int64{3, 24, 81} }, "plan shape [24 81]"},
		{"stacked twice", func(o *plan.TensorPlan) {
			o.Transforms = append([]string{plan.TStackExperts}, o.Transforms...)
		}, "stack-experts appears twice"},
		{"wrong split", func(o *plan.TensorPlan) { o.Split = []int64{20, 60} }, "plan split [20 60]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ck, pl, _ := moeCase(t, filepath.Join(dir, "src"), 3, 24, 40)
			c.edit(&pl.Layers[0].Outputs[0])
			out := filepath.Join(dir, "out")
			_, err := Write(context.Background(), ck, pl, out, Options{Tool: "xpuinject test", Workers: 2})
			if !errors.Is(err, ErrTransform) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "m.gate_up_proj.weight") {
				t.Fatalf("err = %v, want ErrTransform naming the tensor and %q", err, c.want)
			}
			assertNoPack(t, out)
		})
	}
}
