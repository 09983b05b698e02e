package pack

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// TestPlanPacksEveryFixture hands each fixture's plan (all kernels, and with every
// kernel disabled, so kept layers too; bf16 and fp16) to Write: every output the planner
// writes must be one pack can compute, and Verify must find the result matching the plan.
func TestPlanPacksEveryFixture(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "config.json"))
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		for _, c := range []struct {
			disable []string
			dtype   string
		}{{nil, plan.DTypeBF16}, {kernels.Default().Names(), plan.DTypeBF16}, {nil, plan.DTypeFP16}} {
			disable := c.disable
			t.Run(fmt.Sprintf("%s/disable=%d/%s", filepath.Base(dir), len(disable), c.dtype), func(t *testing.T) {
				g, err := models.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				p, err := plan.New(g, nil, plan.Options{Tool: "xpuinject (test)", Disable: disable, DType: c.dtype})
				if err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(t.TempDir(), "packed")
				if _, err := Write(context.Background(), g.Checkpoint, p, out, Options{Tool: "xpuinject (test)"}); err != nil {
					t.Fatalf("pack: %v", err)
				}
				if err := Verify(p, out); err != nil {
					t.Fatalf("verify: %v", err)
				}
			})
		}
	}
}

const fixturesDir = "../../testdata/fixtures"

// srcValues reads a fixture tensor widened to float64.
func srcValues(t *testing.T, ck *models.Checkpoint, name string) []float64 {
	t.Helper()
	st := ck.Tensors[name]
	b, err := os.ReadFile(st.File)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float64, st.Elems())
	if err := DecodeF64(v, b[st.Offset:st.Offset+st.Size], st.DType); err != nil {
		t.Fatal(err)
	}
	return v
}

// The family quirks, packed from the fixtures: Gemma's norm offset folded in fp32, the tied
// embedding left unscaled, Phi-3's fused projections transposed whole with their split.
func TestPackFamilyQuirks(t *testing.T) {
	pack := func(t *testing.T, fixture string) (*models.Checkpoint, *plan.Plan, map[string]packedTensor) {
		g, err := models.Load(filepath.Join(fixturesDir, fixture))
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.New(g, nil, plan.Options{Tool: "xpuinject (test)"})
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "packed")
		if _, err := Write(context.Background(), g.Checkpoint, p, out, Options{Tool: "xpuinject (test)"}); err != nil {
			t.Fatal(err)
		}
		got, _ := readPacked(t, out)
		return g.Checkpoint, p, got
	}
	t.Run("gemma2", func(t *testing.T) {
		ck, _, got := pack(t, "gemma2-tiny")
		for _, norm := range []string{"model.layers.0.input_layernorm", "model.layers.1.pre_feedforward_layernorm", "model.norm"} {
			w := srcValues(t, ck, norm+".weight")
			o, ok := got[norm+".offset_weight"]
			if !ok || o.t.DType != models.F32 || len(o.data) != 4*len(w) {
				t.Fatalf("%s: packed %+v", norm, o.t)
			}
			bf16Loses := 0
			for i, x := range w {
				g := math.Float32frombits(binary.LittleEndian.Uint32(o.data[4*i:]))
				if g != float32(1+x) {
					t.Fatalf("%s[%d] = %v, want float32(1 + %v) = %v", norm, i, g, x, float32(1+x))
				}
				if float64(F32FromBF16(BF16FromF64(1+x))) != float64(g) {
					bf16Loses++
				}
			}
			// the reason the fold stays fp32: in bf16 most of these would round
			if bf16Loses < len(w)/2 {
				t.Errorf("%s: only %d of %d values differ once 1 + w is rounded to bf16", norm, bf16Loses, len(w))
			}
		}
		// the tied embedding is the table, cast, not scaled by √hidden
		e := srcValues(t, ck, "model.embed_tokens.weight")
		if o := got["model.embed_tokens.weight"]; !reflect.DeepEqual(bf16Vals(o.data), refCast(e)) {
			t.Error("model.embed_tokens.weight is not the bf16 cast of the source table")
		}
		if _, ok := got["lm_head.weight"]; ok {
			t.Error("a tied lm_head got a tensor of its own")
		}
	})
	t.Run("phi3", func(t *testing.T) {
		ck, p, got := pack(t, "phi3-tiny")
		for _, c := range []struct {
			src, out string
			split    []int64
		}{
			{"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.self_attn.qkv_proj.weight", []int64{240, 80, 80}},
			{"model.layers.0.mlp.gate_up_proj.weight", "model.layers.0.mlp.gate_up_proj.weight", []int64{192, 192}},
		} {
			st := ck.Tensors[c.src]
			n, k := int(st.Shape[0]), int(st.Shape[1])
			b, _ := os.ReadFile(st.File)
			want := refT(bf16Vals(b[st.Offset:st.Offset+st.Size]), n, k)
			if o := got[c.out]; !reflect.DeepEqual(bf16Vals(o.data), want) || !reflect.DeepEqual(o.t.Shape, []int64{int64(k), int64(n)}) {
				t.Errorf("%s: not the K-major transpose of %s", c.out, c.src)
			}
			var split []int64
			for _, l := range p.Layers {
				for _, o := range l.Outputs {
					if o.Name == c.out {
						split = o.Split
					}
				}
			}
			if !reflect.DeepEqual(split, c.split) {
				t.Errorf("%s: split %v, want %v", c.out, split, c.split)
			}
		}
	})
}
