package pack

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

func TestBNScale(t *testing.T) {
	a, err := BNScale([]float64{1, 2, -3}, []float64{3, 0, 0.25}, 1, "v")
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.5, 2, -3 / math.Sqrt(1.25)}
	for i := range want {
		if a[i] != want[i] {
			t.Errorf("a[%d] = %v, want %v", i, a[i], want[i])
		}
	}
	for _, c := range []struct {
		g, v []float64
		eps  float64
		want string
	}{
		{[]float64{1}, []float64{math.NaN()}, 1e-5, `running_var "v" is NaN at channel 0`},
		{[]float64{1, 1}, []float64{1, -1e-3}, 1e-5, `running_var "v" is negative (-0.001) at channel 1`},
		{[]float64{1}, []float64{0}, 0, "division by zero"},
		{[]float64{1, 2}, []float64{1}, 1e-5, "2 channels"},
		{[]float64{1}, []float64{1}, math.NaN(), "eps"},
		{[]float64{1}, []float64{1}, -1, "eps"},
	} {
		_, err := BNScale(c.g, c.v, c.eps, "v")
		if err == nil || !errors.Is(err, ErrTransform) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BNScale(%v, %v, %v): error %v, want one containing %q", c.g, c.v, c.eps, err, c.want)
		}
	}
}

func TestFoldFunctions(t *testing.T) {
	// 3×2 block starting at row 1 of a matrix whose row scales are a
	w := []float64{1, 2, 3, 4, 5, 6}
	ScaleRows(w, 2, 1, []float64{100, 2, -1, 0.5})
	if want := []float64{2, 4, -3, -4, 2.5, 3}; !slices.Equal(w, want) {
		t.Errorf("ScaleRows = %v, want %v", w, want)
	}
	w = []float64{1, 2, 3, 4, 5, 6}
	ScaleCols(w, []float64{10, -1})
	if want := []float64{10, -2, 30, -4, 50, -6}; !slices.Equal(w, want) {
		t.Errorf("ScaleCols = %v, want %v", w, want)
	}
	// a·(b − μ) + β
	if got := FoldBias([]float64{1, 2}, []float64{2, 3}, []float64{10, 20}, []float64{0.5, 4}); !slices.Equal(got, []float64{11, 14}) {
		t.Errorf("FoldBias = %v", got)
	}
	if got := FoldBias(nil, []float64{2}, []float64{10}, []float64{0.5}); !slices.Equal(got, []float64{9}) {
		t.Errorf("FoldBias(no bias) = %v", got)
	}
	// β − s·μ
	if got := BNInputShift([]float64{2, 3}, []float64{1, 1}, []float64{1, -1}); !slices.Equal(got, []float64{-1, 4}) {
		t.Errorf("BNInputShift = %v", got)
	}
	// rows 1..2 of W (2 cols) dotted with t, added to out[1], out[2]
	out := []float64{7, 1, 1}
	AddRowDots(out, []float64{1, 2, 3, 4}, 1, []float64{10, 100})
	if want := []float64{7, 211, 431}; !slices.Equal(out, want) {
		t.Errorf("AddRowDots = %v, want %v", out, want)
	}
}

func TestCodecs(t *testing.T) {
	vals := []float64{1, -2.5, 65504, 1e-8, math.Inf(-1), 3.14159}
	for _, dt := range []models.DType{models.F32, models.F16, models.BF16} {
		b := make([]byte, len(vals)*dt.Size())
		if err := EncodeF64(b, vals, dt); err != nil {
			t.Fatal(err)
		}
		back := make([]float64, len(vals))
		if err := DecodeF64(back, b, dt); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			var want float64
			switch dt {
			case models.F32:
				want = float64(float32(v))
			case models.F16:
				want = float64(F32FromF16(F16FromF64(v)))
			case models.BF16:
				want = float64(F32FromBF16(BF16FromF64(v)))
			}
			if back[i] != want {
				t.Errorf("%s round trip of %v = %v, want %v", dt, v, back[i], want)
			}
		}
		// CastToBF16 from dt agrees with rounding the decoded value
		c := make([]byte, 2*len(vals))
		if err := CastToBF16(c, b, dt, len(vals)); err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			if got, want := binary.LittleEndian.Uint16(c[2*i:]), BF16FromF64(back[i]); got != want {
				t.Errorf("CastToBF16 %s [%d] = %#04x, want %#04x", dt, i, got, want)
			}
		}
	}
	for _, dt := range []models.DType{models.I32, models.F64, models.U8, "F8_E4M3"} {
		if err := DecodeF64(make([]float64, 1), make([]byte, 8), dt); !errors.Is(err, ErrTransform) {
			t.Errorf("DecodeF64(%s) error %v", dt, err)
		}
		if err := EncodeF64(make([]byte, 8), []float64{1}, dt); !errors.Is(err, ErrTransform) {
			t.Errorf("EncodeF64(%s) error %v", dt, err)
		}
		if err := CastToBF16(make([]byte, 8), make([]byte, 8), dt, 1); !errors.Is(err, ErrTransform) {
			t.Errorf("CastToBF16(%s) error %v", dt, err)
		}
	}
}

func TestTransposeInto(t *testing.T) {
	for _, es := range []int{1, 2, 4, 8} {
		const n, k = 5, 3
		src := make([]byte, n*k*es)
		for i := range src {
			src[i] = byte(i)
		}
		dst := make([]byte, len(src))
		// two row blocks: rows 0..1 and 2..4
		TransposeInto(dst, src[:2*k*es], es, 2, k, n, 0)
		TransposeInto(dst, src[2*k*es:], es, 3, k, n, 2)
		for r := 0; r < n; r++ {
			for c := 0; c < k; c++ {
				if !slices.Equal(dst[es*(c*n+r):es*(c*n+r+1)], src[es*(r*k+c):es*(r*k+c+1)]) {
					t.Fatalf("es %d: dst[%d][%d] != src[%d][%d]", es, c, r, r, c)
				}
			}
		}
	}
}

// TestNewRecipeRoles covers PLAN.md's source-count conventions for fold biases.
func TestNewRecipeRoles(t *testing.T) {
	info := map[string]srcInfo{
		"W":   {"W", models.F32, []int64{4, 3}},
		"b":   {"b", models.F32, []int64{4}},
		"g3":  {"g3", models.F32, []int64{3}},
		"g4":  {"g4", models.F32, []int64{4}},
		"c":   {"c", models.F32, []int64{4, 2, 3, 3}},
		"h16": {"h16", models.F16, []int64{4}},
	}
	src := func(n string) (srcInfo, bool) { s, ok := info[n]; return s, ok }
	lp := &plan.LayerPlan{Module: "L", Eps: 1e-5}
	for _, c := range []struct {
		o      plan.TensorPlan
		op     opKind
		bias   string
		errSub string
	}{
		{plan.TensorPlan{Name: "x", Role: "bias", Sources: []string{"b", "g4", "g4", "g4", "g4"}, Transforms: []string{plan.TFoldBN}, Shape: []int64{4}, DType: "F32"}, opFoldBias, "b", ""},
		{plan.TensorPlan{Name: "x", Role: "bias", Sources: []string{"g4", "g4", "g4", "g4"}, Transforms: []string{plan.TFoldBN}, Shape: []int64{4}, DType: "F32"}, opFoldBias, "", ""},
		{plan.TensorPlan{Name: "x", Role: "bias", Sources: []string{"W", "b", "g3", "g3", "g3", "g3"}, Transforms: []string{plan.TFoldBNInput, plan.TCastBF16}, Shape: []int64{4}, DType: "BF16"}, opFoldInBias, "b", ""},
		{plan.TensorPlan{Name: "x", Role: "bias", Sources: []string{"W", "g3", "g3", "g3", "g3"}, Transforms: []string{plan.TFoldBNInput}, Shape: []int64{4}, DType: "F32"}, opFoldInBias, "", ""},
		{plan.TensorPlan{Name: "x", Role: "weight", Sources: []string{"W", "g3", "g3", "g3", "g3"}, Transforms: []string{plan.TFoldBNInput, plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{3, 4}, DType: "BF16", Layout: plan.LayoutKMajor}, opFoldCols, "", ""},
		{plan.TensorPlan{Name: "x", Role: "weight", Sources: []string{"c", "g4", "g4", "g4", "g4"}, Transforms: []string{plan.TFoldConvBN}, Shape: []int64{4, 2, 3, 3}, DType: "F32"}, opFoldRows, "", ""},
		{plan.TensorPlan{Name: "x", Role: "weight", Sources: []string{"c", "g4", "g4", "g4", "g4"}, Transforms: []string{plan.TFoldConvBN, plan.TPrepackKMajor}, Shape: []int64{4, 2, 3, 3}, DType: "F32"}, 0, "", "prepack-kmajor needs a 2-D"},
		{plan.TensorPlan{Name: "x", Role: "weight", Sources: []string{"W", "g4", "g4", "g4"}, Transforms: []string{plan.TFoldBN}, Shape: []int64{4, 3}, DType: "F32"}, 0, "", "wants 4 BatchNorm sources"},
		{plan.TensorPlan{Name: "x", Role: "weight", Sources: []string{"W", "g3", "g3", "g3", "g3"}, Transforms: []string{plan.TFoldBN}, Shape: []int64{4, 3}, DType: "F32"}, 0, "", "want [4]"},
		{plan.TensorPlan{Name: "x", Role: "gain", Sources: []string{"W", "g4", "g4", "g4", "g4"}, Transforms: []string{plan.TFoldBN}, Shape: []int64{4, 3}, DType: "F32"}, 0, "", `role "gain"`},
		{plan.TensorPlan{Name: "x", Sources: []string{"b", "h16"}, Transforms: []string{plan.TConcatQKV}, Shape: []int64{8}, DType: "F32"}, 0, "", "mix dtypes"},
		{plan.TensorPlan{Name: "x", Sources: []string{"b", "h16"}, Transforms: []string{plan.TConcatQKV, plan.TCastBF16}, Shape: []int64{8}, DType: "BF16"}, opCopy, "", ""},
		{plan.TensorPlan{Name: "x", Sources: []string{"b", "g4"}, Shape: []int64{4}, DType: "F32"}, 0, "", "no concat transform"},
		{plan.TensorPlan{Name: "x", Sources: nil, Shape: []int64{4}, DType: "F32"}, 0, "", "no sources"},
	} {
		r, err := newRecipe(lp, c.o, src)
		if c.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSub) || !strings.Contains(err.Error(), "layer L") {
				t.Errorf("%v %v: error %v, want one containing %q and the layer", c.o.Sources, c.o.Transforms, err, c.errSub)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v %v: %v", c.o.Sources, c.o.Transforms, err)
			continue
		}
		if r.Op != c.op || r.Bias != c.bias {
			t.Errorf("%v %v: op %d bias %q, want %d %q", c.o.Sources, c.o.Transforms, r.Op, r.Bias, c.op, c.bias)
		}
	}
}

// TestCastToBF16Lengths checks the 4-at-a-time F32 loop and its tail against the scalar
// rounding, NaNs included, for every length 0..19.
func TestCastToBF16Lengths(t *testing.T) {
	bits := []uint32{0x3f808000, 0x7fc00001, 0xff800001, 0x7f7fffff, 0x00018000, 0x80000001, 0x3f818000, 0x12345678,
		0x7f800000, 0x3f808001, 0xc0490fdb, 0x00000000, 0x80000000, 0x7f7f8000, 0x41c80000, 0xdeadbeef, 0x7fbfffff, 1, 2}
	for n := 0; n <= len(bits); n++ {
		src := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(src[4*i:], bits[i])
		}
		dst := make([]byte, 2*n+2)
		if err := CastToBF16(dst, src, models.F32, n); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if got, want := binary.LittleEndian.Uint16(dst[2*i:]), BF16FromF32(math.Float32frombits(bits[i])); got != want {
				t.Errorf("n=%d [%d] %#08x -> %#04x, want %#04x", n, i, bits[i], got, want)
			}
		}
		if dst[2*n] != 0 || dst[2*n+1] != 0 {
			t.Errorf("n=%d: wrote past the end", n)
		}
	}
}

func BenchmarkCastToBF16(b *testing.B) {
	const n = 1 << 18
	src := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(float32(i)*0.001))
	}
	dst := make([]byte, 2*n)
	b.SetBytes(4 * n)
	for i := 0; i < b.N; i++ {
		_ = CastToBF16(dst, src, models.F32, n)
	}
}

// BenchmarkTransposeInto: a 128-row block of a [3072, 2048] bf16 matrix (a Llama qkv).
func BenchmarkTransposeInto(b *testing.B) {
	rows, cols, n := 128, 2048, 3072
	src := make([]byte, 2*rows*cols)
	dst := make([]byte, 2*cols*n)
	b.SetBytes(int64(2 * rows * cols))
	for i := 0; i < b.N; i++ {
		TransposeInto(dst, src, 2, rows, cols, n, 0)
	}
}

// CastToF16 rounds once to nearest-even fp16: every BF16 bit pattern (against f16Ref on
// its exact float32), float32 values of every class (normal, tie, fp16 subnormal,
// underflow, overflow to inf, inf, NaN, -0), and F16 copied bit for bit.
func TestCastToF16(t *testing.T) {
	src := make([]byte, 2*65536)
	for h := 0; h < 65536; h++ {
		binary.LittleEndian.PutUint16(src[2*h:], uint16(h))
	}
	dst := make([]byte, len(src))
	if err := CastToF16(dst, src, models.BF16, 65536); err != nil {
		t.Fatal(err)
	}
	for h := 0; h < 65536; h++ {
		u := uint32(h) << 16
		got := binary.LittleEndian.Uint16(dst[2*h:])
		if u&0x7fffffff > 0x7f800000 {
			if got&0x7fff <= 0x7c00 || got&0x8000 != uint16(h)&0x8000 {
				t.Fatalf("bf16 NaN %#04x -> %#04x, want a NaN with its sign", h, got)
			}
			continue
		}
		if g, want := float64(F32FromF16(got)), f16Ref(u); !sameValue(g, want) {
			t.Fatalf("bf16 %#04x (%g) -> fp16 %#04x (%g), want %g", h, F32FromBF16(uint16(h)), got, g, want)
		}
	}
	f32s := []float32{1, -1.5, 65504, 65519.996, 65520, -65520, 1e9, float32(math.Inf(-1)), 6.103515625e-05,
		5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1e-10, float32(math.Copysign(0, -1)), 1.0009765625, 1.00048828125,
		1.00146484375, float32(math.NaN()), 3.0517578e-05}
	src = make([]byte, 4*len(f32s))
	for i, f := range f32s {
		binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(f))
	}
	dst = make([]byte, 2*len(f32s))
	if err := CastToF16(dst, src, models.F32, len(f32s)); err != nil {
		t.Fatal(err)
	}
	want := []uint16{0x3c00, 0xbe00, 0x7bff, 0x7bff, 0x7c00, 0xfc00, 0x7c00, 0xfc00, 0x0400,
		0x0001, 0x0000, 0x0001, 0x0000, 0x8000, 0x3c01, 0x3c00, 0x3c02, 0, 0x0200}
	for i, f := range f32s {
		got := binary.LittleEndian.Uint16(dst[2*i:])
		if math.IsNaN(float64(f)) {
			if got&0x7c00 != 0x7c00 || got&0x03ff == 0 {
				t.Errorf("NaN -> %#04x", got)
			}
			continue
		}
		if got != want[i] {
			t.Errorf("f32 %g -> %#04x, want %#04x", f, got, want[i])
		}
	}
	f16 := []byte{1, 2, 3, 4}
	out := make([]byte, 4)
	if err := CastToF16(out, f16, models.F16, 2); err != nil || string(out) != string(f16) {
		t.Errorf("F16 not copied: %v %v", out, err)
	}
	if err := CastToF16(out, f16, models.I32, 1); err == nil {
		t.Error("I32 cast to F16")
	}
}

func TestAddOne(t *testing.T) {
	w := []float64{0, -0.25, 0.3000000119, -1, 1e-9}
	got := AddOne(w)
	for i, x := range w {
		if got[i] != 1+x {
			t.Errorf("AddOne[%d] = %v, want %v", i, got[i], 1+x)
		}
	}
	// add-one writes F32 and refuses a cast or a prepack after it
	lp := &plan.LayerPlan{Module: "m"}
	src := func(string) (srcInfo, bool) { return srcInfo{Name: "w", DType: models.BF16, Shape: []int64{8}}, true }
	for _, c := range []struct {
		ts   []string
		dt   string
		want string
	}{
		{[]string{plan.TAddOne, plan.TCastBF16}, "BF16", "takes no cast"},
		{[]string{plan.TAddOne}, "BF16", "plan dtype BF16"},
	} {
		o := plan.TensorPlan{Name: "m.offset_weight", Sources: []string{"w"}, Transforms: c.ts, Shape: []int64{8}, DType: c.dt, Layout: plan.LayoutRowMajor}
		if _, err := newRecipe(lp, o, src); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.ts, err, c.want)
		}
	}
	o := plan.TensorPlan{Name: "m.offset_weight", Sources: []string{"w"}, Transforms: []string{plan.TAddOne}, Shape: []int64{8}, DType: "F32", Layout: plan.LayoutRowMajor}
	if r, err := newRecipe(lp, o, src); err != nil || r.OutDT != models.F32 || r.Op != opAddOne {
		t.Errorf("add-one recipe %+v, %v", r, err)
	}
}

// TestDeinterleavePerm: GLM's adjacent rotary pairs in rotate-half order, head by head, the
// channels past rotary_dim and v left in place; bad dims and splits are refused.
func TestDeinterleavePerm(t *testing.T) {
	// 2 q heads, 1 k head, 1 v head of head_dim 6, 4 channels rotating
	dims := map[string]int64{"heads": 2, "kv_heads": 1, "head_dim": 6, "rotary_dim": 4}
	got, err := DeinterleavePerm([]int64{12, 6, 6}, dims)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 2, 1, 3, 4, 5, 6, 8, 7, 9, 10, 11, 12, 14, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23}
	if !slices.Equal(got, want) {
		t.Errorf("perm %v, want %v", got, want)
	}
	// every channel rotating: head_dim 4 gives (0, 2, 1, 3) per head
	got, _ = DeinterleavePerm([]int64{4, 4, 4}, map[string]int64{"heads": 1, "kv_heads": 1, "head_dim": 4})
	if want := []int64{0, 2, 1, 3, 4, 6, 5, 7, 8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Errorf("whole-head perm %v, want %v", got, want)
	}
	for _, c := range []struct {
		split []int64
		dims  map[string]int64
		want  string
	}{
		{[]int64{12, 6, 6}, map[string]int64{"heads": 2, "kv_heads": 1, "head_dim": 6, "rotary_dim": 3}, "even count"},
		{[]int64{12, 6, 6}, map[string]int64{"heads": 2, "kv_heads": 1, "head_dim": 6, "rotary_dim": 8}, "even count"},
		{[]int64{12, 6}, dims, "split [12 6]"},
		{[]int64{12, 6, 6}, map[string]int64{"heads": 2, "head_dim": 6}, "kv_heads 0"},
	} {
		if _, err := DeinterleavePerm(c.split, c.dims); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want %q", c.split, c.dims, err, c.want)
		}
	}
	// in a recipe: only after concat-qkv, with the layer's dims
	src := func(name string) (srcInfo, bool) {
		return srcInfo{Name: name, DType: models.BF16, Shape: map[string][]int64{"q": {12, 8}, "k": {6, 8}, "v": {6, 8}}[name]}, true
	}
	lp := &plan.LayerPlan{Module: "L", Dims: dims}
	o := plan.TensorPlan{Name: "x", Sources: []string{"q", "k", "v"}, Transforms: []string{plan.TConcatQKV, plan.TRopeDeinterleave,
		plan.TPrepackKMajor}, Shape: []int64{8, 24}, DType: "BF16", Layout: plan.LayoutKMajor, Split: []int64{12, 6, 6}}
	r, err := newRecipe(lp, o, src)
	if err != nil || !slices.Equal(r.Perm, want) || !r.Raw {
		t.Errorf("recipe %+v, %v", r, err)
	}
	o.Transforms = []string{plan.TRopeDeinterleave, plan.TConcatQKV}
	if _, err := newRecipe(lp, o, src); err == nil || !strings.Contains(err.Error(), "rope-deinterleave reorders a concat-qkv output") {
		t.Errorf("rope-deinterleave first: %v", err)
	}
}
