package pack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// Weight transforms as pure functions over float64 slices, and the recipe that says
// how one planned output tensor is computed from its sources (PLAN.md's table, checked
// against shapes and dtypes before any byte is written). pack.go does the I/O and
// streams rows through these.

// ErrTransform marks an output tensor that cannot be computed: unknown or misordered
// transforms, a source dtype that cannot be folded or cast, shapes that disagree, or bad
// BatchNorm statistics (NaN or negative running variance).
var ErrTransform = errors.New("inject: transform")

// BNScale returns a[i] = γ[i] / √(σ²[i] + eps), the per-channel scale of a BatchNorm in
// eval mode. A NaN or negative σ² (or one that makes σ²+eps ≤ 0) is an error naming the
// tensor and channel: folding it would write NaN or Inf weights silently.
func BNScale(gamma, variance []float64, eps float64, varName string) ([]float64, error) {
	if len(gamma) != len(variance) {
		return nil, fmt.Errorf("%w: batchnorm weight has %d channels, running_var %q has %d",
			ErrTransform, len(gamma), varName, len(variance))
	}
	if math.IsNaN(eps) || eps < 0 {
		return nil, fmt.Errorf("%w: batchnorm eps %v is not a non-negative number", ErrTransform, eps)
	}
	a := make([]float64, len(gamma))
	for i, v := range variance {
		switch {
		case math.IsNaN(v):
			return nil, fmt.Errorf("%w: running_var %q is NaN at channel %d", ErrTransform, varName, i)
		case v < 0:
			return nil, fmt.Errorf("%w: running_var %q is negative (%v) at channel %d", ErrTransform, varName, v, i)
		case v+eps <= 0:
			return nil, fmt.Errorf("%w: running_var %q + eps is 0 at channel %d (division by zero)", ErrTransform, varName, i)
		}
		a[i] = gamma[i] / math.Sqrt(v+eps)
	}
	return a, nil
}

// ScaleRows multiplies row r (of cols elements) of the row-major block w, whose first
// row is row0 of the matrix, by a[row0+r]: diag(a)·W for fold-bn and fold-conv-bn.
func ScaleRows(w []float64, cols, row0 int, a []float64) {
	for r := 0; r*cols < len(w); r++ {
		s := a[row0+r]
		row := w[r*cols : (r+1)*cols]
		for j := range row {
			row[j] *= s
		}
	}
}

// ScaleCols multiplies column j of the row-major block w by s[j]: W·diag(s) for
// fold-bn-input.
func ScaleCols(w []float64, s []float64) {
	cols := len(s)
	for r := 0; r*cols < len(w); r++ {
		row := w[r*cols : (r+1)*cols]
		for j := range row {
			row[j] *= s[j]
		}
	}
}

// FoldBias returns a·(b − μ) + β, the bias of a Linear or Conv2d with the following
// BatchNorm folded in; b may be nil (no bias: 0).
func FoldBias(b, a, beta, mean []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		var bi float64
		if b != nil {
			bi = b[i]
		}
		// float64(...) forbids fusing into an FMA (Go spec, Floating-point operators), so
		// results are the same on every architecture and match numpy/torch's float64.
		out[i] = float64(a[i]*(bi-mean[i])) + beta[i]
	}
	return out
}

// BNInputShift returns t = β − s·μ, the vector fold-bn-input's bias multiplies W with.
func BNInputShift(s, beta, mean []float64) []float64 {
	t := make([]float64, len(s))
	for j := range s {
		t[j] = beta[j] - float64(s[j]*mean[j]) // no FMA, see FoldBias
	}
	return t
}

// AddRowDots adds W[r]·t to out[row0+r] for each row r of the row-major block w:
// the b + W·(β − s·μ) of fold-bn-input, one row block at a time. Sums run left to right
// in float64.
func AddRowDots(out []float64, w []float64, row0 int, t []float64) {
	cols := len(t)
	for r := 0; r*cols < len(w); r++ {
		row := w[r*cols : (r+1)*cols]
		var sum float64
		for j, x := range row {
			sum += float64(x * t[j]) // no FMA, see FoldBias
		}
		out[row0+r] += sum
	}
}

// AddOne returns 1 + w[i] for each element: the (1 + weight) of Gemma's RMSNorm, exact in
// float64 (w is at most fp32) so the F32 encode rounds once, as torch's fp32 add does.
func AddOne(w []float64) []float64 {
	out := make([]float64, len(w))
	for i, x := range w {
		out[i] = 1 + x
	}
	return out
}

// ---- dtype codecs over little-endian byte slices ----

// decodable reports whether pack can do arithmetic on dt.
func decodable(dt models.DType) bool {
	return dt == models.F32 || dt == models.F16 || dt == models.BF16
}

// DecodeF64 widens len(dst) elements of dtype dt from src to float64 (exact).
func DecodeF64(dst []float64, src []byte, dt models.DType) error {
	switch dt {
	case models.F32:
		for i := range dst {
			dst[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
		}
	case models.F16:
		for i := range dst {
			dst[i] = float64(F32FromF16(binary.LittleEndian.Uint16(src[2*i:])))
		}
	case models.BF16:
		for i := range dst {
			dst[i] = float64(F32FromBF16(binary.LittleEndian.Uint16(src[2*i:])))
		}
	default:
		return fmt.Errorf("%w: cannot decode dtype %s (F32, F16, BF16 only)", ErrTransform, dt)
	}
	return nil
}

// EncodeF64 rounds src to dtype dt (nearest-even, one rounding) into dst.
func EncodeF64(dst []byte, src []float64, dt models.DType) error {
	switch dt {
	case models.F32:
		for i, x := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(float32(x)))
		}
	case models.F16:
		for i, x := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F16FromF64(x))
		}
	case models.BF16:
		for i, x := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], BF16FromF64(x))
		}
	default:
		return fmt.Errorf("%w: cannot encode dtype %s (F32, F16, BF16 only)", ErrTransform, dt)
	}
	return nil
}

// CastToBF16 converts n elements of dtype dt in src to bf16 in dst (2n bytes). F32 and
// F16 round to nearest-even (F16 widens to F32 exactly first); BF16 is copied.
func CastToBF16(dst, src []byte, dt models.DType, n int) error {
	switch dt {
	case models.F32:
		// Four elements per step through 64-bit loads and one 64-bit store, advancing the
		// slices so the compiler drops the bounds checks: 0.9 ns/element against 1.8 for
		// one element per step (BenchmarkCastToBF16, 2-core Xeon).
		src = src[:4*n]
		dst = dst[:2*n]
		for len(src) >= 16 && len(dst) >= 8 {
			x := binary.LittleEndian.Uint64(src)
			y := binary.LittleEndian.Uint64(src[8:])
			binary.LittleEndian.PutUint64(dst, uint64(bf16Bits(uint32(x)))|uint64(bf16Bits(uint32(x>>32)))<<16|
				uint64(bf16Bits(uint32(y)))<<32|uint64(bf16Bits(uint32(y>>32)))<<48)
			src = src[16:]
			dst = dst[8:]
		}
		for len(src) >= 4 && len(dst) >= 2 {
			binary.LittleEndian.PutUint16(dst, bf16Bits(binary.LittleEndian.Uint32(src)))
			src = src[4:]
			dst = dst[2:]
		}
	case models.F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], BF16FromF32(F32FromF16(binary.LittleEndian.Uint16(src[2*i:]))))
		}
	case models.BF16:
		copy(dst[:2*n], src[:2*n])
	default:
		return fmt.Errorf("%w: cannot cast dtype %s to BF16 (F32, F16, BF16 only)", ErrTransform, dt)
	}
	return nil
}

// CastToF16 converts n elements of dtype dt in src to fp16 in dst (2n bytes), rounding to
// nearest-even once: F32 and BF16 (widened to F32 exactly) through F16FromF32, so values
// beyond fp16's range become ±inf and small ones fp16 subnormals or ±0; F16 is copied.
func CastToF16(dst, src []byte, dt models.DType, n int) error {
	switch dt {
	case models.F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], F16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))))
		}
	case models.BF16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(dst[2*i:], F16FromF32(F32FromBF16(binary.LittleEndian.Uint16(src[2*i:]))))
		}
	case models.F16:
		copy(dst[:2*n], src[:2*n])
	default:
		return fmt.Errorf("%w: cannot cast dtype %s to F16 (F32, F16, BF16 only)", ErrTransform, dt)
	}
	return nil
}

// castTo converts n elements of dtype dt to out (BF16 or F16).
func castTo(out models.DType, dst, src []byte, dt models.DType, n int) error {
	if out == models.F16 {
		return CastToF16(dst, src, dt, n)
	}
	return CastToBF16(dst, src, dt, n)
}

// bf16Bits is BF16FromF32 on raw bits (kept small so the compiler inlines it in loops).
func bf16Bits(u uint32) uint16 {
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// TransposeInto writes the row block src (rows × cols elements of size es bytes, rows
// row0.. of an [N, cols] matrix) into dst, the K-major [cols, N] matrix: dst[k][row0+r] =
// src[r][k]. Loops run k outer so each write is a contiguous run of rows.
func TransposeInto(dst, src []byte, es, rows, cols, n, row0 int) {
	switch es {
	case 2:
		// k outer: each k writes one contiguous run of `rows` elements; the strided reads
		// stay inside the source block (≤ packBlockBytes, cache-resident). 16-bit loads
		// and stores with a running source index: 1.0 ns/element against 1.75 for byte
		// copies (BenchmarkTransposeInto).
		stride := 2 * cols
		for k := 0; k < cols; k++ {
			d := dst[2*(k*n+row0) : 2*(k*n+row0+rows)]
			s := 2 * k
			for r := 0; r+1 < len(d); r += 2 {
				binary.LittleEndian.PutUint16(d[r:], binary.LittleEndian.Uint16(src[s:]))
				s += stride
			}
		}
	case 4:
		for k := 0; k < cols; k++ {
			d := dst[4*(k*n+row0) : 4*(k*n+row0+rows)]
			for r := 0; r < rows; r++ {
				copy(d[4*r:4*r+4], src[4*(r*cols+k):])
			}
		}
	default:
		for k := 0; k < cols; k++ {
			for r := 0; r < rows; r++ {
				copy(dst[es*(k*n+row0+r):es*(k*n+row0+r+1)], src[es*(r*cols+k):])
			}
		}
	}
}

// DeinterleavePerm is rope-deinterleave's row order for a q|k|v concatenation of the given
// split: output row o reads source row perm[o]. In each q and k head, the first rotary_dim
// rows (dims "rotary_dim", else all of "head_dim") become their even rows, then their odd
// ones: the adjacent pairs (2i, 2i+1) GLM's RoPE rotates become rotate-half's (i, i + R/2).
// Rows past rotary_dim, and v, keep their places.
func DeinterleavePerm(split []int64, dims map[string]int64) ([]int64, error) {
	h, kv, hd := dims["heads"], dims["kv_heads"], dims["head_dim"]
	rot := dims["rotary_dim"]
	if rot == 0 {
		rot = hd
	}
	if h <= 0 || kv <= 0 || hd <= 0 {
		return nil, fmt.Errorf("the layer's dims give heads %d, kv_heads %d, head_dim %d", h, kv, hd)
	}
	if rot%2 != 0 || rot > hd {
		return nil, fmt.Errorf("rotary_dim %d: want an even count up to head_dim %d", rot, hd)
	}
	if len(split) != 3 || split[0] != h*hd || split[1] != kv*hd || split[2] != kv*hd {
		return nil, fmt.Errorf("split %v, the layer's heads want [%d %d %d]", split, h*hd, kv*hd, kv*hd)
	}
	perm := make([]int64, split[0]+split[1]+split[2])
	for i := range perm {
		perm[i] = int64(i)
	}
	for head := int64(0); head < h+kv; head++ {
		base := head * hd
		for j := int64(0); j < rot/2; j++ {
			perm[base+j] = base + 2*j
			perm[base+rot/2+j] = base + 2*j + 1
		}
	}
	return perm, nil
}

// ---- recipes: PLAN.md's table, checked ----

// opKind is the arithmetic an output needs, decided by its first transform and role.
type opKind int

const (
	opCopy       opKind = iota // sources[0] (or the concatenation of sources) as is, maybe cast
	opFoldRows                 // fold-bn / fold-conv-bn weight: row i scaled by a[i]
	opFoldCols                 // fold-bn-input weight: column j scaled by s[j]
	opFoldBias                 // fold-bn / fold-conv-bn bias: a·(b − μ) + β
	opFoldInBias               // fold-bn-input bias: b + W·(β − s·μ)
	opAddOne                   // add-one: 1 + w, F32
	opStack                    // stack-experts: Subs written one after another (transform_moe.go)
)

// srcInfo is what a recipe needs to know about a source tensor.
type srcInfo struct {
	Name  string
	DType models.DType
	Shape []int64
}

// recipe is a checked TensorPlan: what to read, how to combine, what comes out.
type recipe struct {
	Out    plan.TensorPlan
	Layer  string // module path, for errors
	Eps    float64
	Op     opKind
	Main   string   // fold names: the main transform (fold-bn, ...), "" for copy/concat
	Parts  []string // row sources (concatenated along dim 0), in order
	W      string   // fold-bn-input bias: the Linear weight
	Bias   string   // fold biases: the Linear/Conv bias, "" when absent (b = 0)
	BN     [4]string
	CastTo models.DType // BF16 or F16: arithmetic result or source rounded to it; "" none
	KMajor bool         // transposed [N, K] -> [K, N]
	Rows   int64        // rows of the pre-transpose 2-D view
	Cols   int64        // elements per row of that view
	InDT   models.DType
	OutDT  models.DType
	Raw    bool // bytes copied/rearranged without decoding (no arithmetic, no rounding)
	// viewShape is the result's shape before prepack-kmajor.
	viewShape []int64
	// Subs are a stacked output's slices, one recipe per expert (opStack).
	Subs []*recipe
	// Perm, when set, reorders rows: output row o is source row Perm[o] of the
	// concatenation (rope-deinterleave).
	Perm []int64
}

func (r *recipe) errf(format string, a ...any) error {
	return fmt.Errorf("%w: tensor %q (layer %s): %s", ErrTransform, r.Out.Name, r.Layer, fmt.Sprintf(format, a...))
}

// outBytes is the size of the output tensor in bytes.
func (r *recipe) outBytes() int64 { return r.Rows * r.Cols * int64(r.OutDT.Size()) }

// newRecipe checks one TensorPlan of layer lp against PLAN.md and the source tensors.
func newRecipe(lp *plan.LayerPlan, o plan.TensorPlan, src func(name string) (srcInfo, bool)) (*recipe, error) {
	r := &recipe{Out: o, Layer: lp.Module, Eps: lp.Eps}
	if len(o.Sources) == 0 {
		return nil, r.errf("no sources")
	}
	infos := make([]srcInfo, len(o.Sources))
	for i, n := range o.Sources {
		s, ok := src(n)
		if !ok {
			return nil, r.errf("source %q is not in the checkpoint", n)
		}
		infos[i] = s
	}
	if len(o.Transforms) > 0 && o.Transforms[0] == plan.TStackExperts {
		return newStackRecipe(lp, o, src)
	}
	// Transform order: [main] [rope-deinterleave] [cast-bf16 | cast-fp16] [prepack-kmajor].
	ts := o.Transforms
	if len(ts) > 0 {
		switch ts[0] {
		case plan.TFoldBN, plan.TFoldBNInput, plan.TFoldConvBN, plan.TConcatQKV, plan.TConcatGateUp, plan.TAddOne:
			r.Main = ts[0]
			ts = ts[1:]
		}
	}
	deinterleave := len(ts) > 0 && ts[0] == plan.TRopeDeinterleave
	if deinterleave {
		if r.Main != plan.TConcatQKV {
			return nil, r.errf("rope-deinterleave reorders a concat-qkv output, but the transforms are %v", o.Transforms)
		}
		ts = ts[1:]
	}
	if len(ts) > 0 && (ts[0] == plan.TCastBF16 || ts[0] == plan.TCastFP16) {
		r.CastTo = models.BF16
		if ts[0] == plan.TCastFP16 {
			r.CastTo = models.F16
		}
		ts = ts[1:]
	}
	if len(ts) > 0 && ts[0] == plan.TPrepackKMajor {
		r.KMajor = true
		ts = ts[1:]
	}
	if len(ts) > 0 {
		return nil, r.errf("transforms %v: %q is unknown or out of order (want [fold or concat] [rope-deinterleave] [cast-bf16 or cast-fp16] [prepack-kmajor])",
			o.Transforms, ts[0])
	}
	wantLayout := plan.LayoutRowMajor
	if r.KMajor {
		wantLayout = plan.LayoutKMajor
	}
	if o.Layout != "" && o.Layout != wantLayout {
		return nil, r.errf("layout %q, but the transforms %v make it %s", o.Layout, o.Transforms, wantLayout)
	}

	vec := func(i int, n int64, what string) error {
		s := infos[i]
		if len(s.Shape) != 1 || s.Shape[0] != n {
			return r.errf("%s %q has shape %v, want [%d]", what, s.Name, s.Shape, n)
		}
		return nil
	}
	bn := func(at int, n int64) error {
		if len(infos)-at != 4 {
			return r.errf("%s %s wants 4 BatchNorm sources (weight, bias, running_mean, running_var) after the %s, got %d",
				r.Main, o.Role, "layer tensors", len(infos)-at)
		}
		for k, what := range []string{"batchnorm weight", "batchnorm bias", "running_mean", "running_var"} {
			if err := vec(at+k, n, what); err != nil {
				return err
			}
			r.BN[k] = infos[at+k].Name
		}
		return nil
	}
	switch r.Main {
	case plan.TAddOne:
		if len(infos) != 1 || len(infos[0].Shape) != 1 {
			return nil, r.errf("add-one wants one 1-D source (a norm weight), got %d sources, the first of shape %v",
				len(infos), infos[0].Shape)
		}
		if r.CastTo != "" || r.KMajor {
			return nil, r.errf("add-one writes F32 and takes no cast or prepack (transforms %v)", o.Transforms)
		}
		r.Op, r.Parts = opAddOne, []string{infos[0].Name}
		r.setView(infos[0].Shape)
	case "":
		if len(infos) != 1 {
			return nil, r.errf("%d sources but no concat transform", len(infos))
		}
		r.Op, r.Parts = opCopy, []string{infos[0].Name}
		r.setView(infos[0].Shape)
	case plan.TConcatQKV, plan.TConcatGateUp:
		r.Op = opCopy
		var rows int64
		split := make([]int64, len(infos))
		for i, s := range infos {
			if len(s.Shape) != len(infos[0].Shape) || len(s.Shape) < 1 || len(s.Shape) > 2 ||
				len(s.Shape) == 2 && s.Shape[1] != infos[0].Shape[1] {
				return nil, r.errf("cannot concatenate %q %v with %q %v along dim 0 (shape mismatch between sources)",
					infos[0].Name, infos[0].Shape, s.Name, s.Shape)
			}
			rows += s.Shape[0]
			split[i] = s.Shape[0]
			r.Parts = append(r.Parts, s.Name)
		}
		if o.Split != nil && !slices.Equal(o.Split, split) {
			return nil, r.errf("plan split %v, sources give %v", o.Split, split)
		}
		shape := slices.Clone(infos[0].Shape)
		shape[0] = rows
		r.setView(shape)
		if deinterleave {
			perm, err := DeinterleavePerm(split, lp.Dims)
			if err != nil {
				return nil, r.errf("rope-deinterleave: %v", err)
			}
			r.Perm = perm
		}
	case plan.TFoldBN, plan.TFoldConvBN:
		w := infos[0]
		switch o.Role {
		case "weight":
			if r.Main == plan.TFoldBN && len(w.Shape) != 2 {
				return nil, r.errf("fold-bn weight %q has shape %v, want 2-D [out, in]", w.Name, w.Shape)
			}
			if r.Main == plan.TFoldConvBN && len(w.Shape) != 4 {
				return nil, r.errf("fold-conv-bn weight %q has shape %v, want 4-D [out, in, kh, kw]", w.Name, w.Shape)
			}
			if err := bn(1, w.Shape[0]); err != nil {
				return nil, err
			}
			r.Op, r.Parts = opFoldRows, []string{w.Name}
			r.setView(w.Shape)
		case "bias":
			at := 0
			if len(infos) == 5 {
				r.Bias, at = infos[0].Name, 1
			}
			n := infos[len(infos)-4].Shape
			if len(n) != 1 {
				return nil, r.errf("batchnorm weight %q has shape %v, want 1-D", infos[len(infos)-4].Name, n)
			}
			if at == 1 {
				if err := vec(0, n[0], "bias"); err != nil {
					return nil, err
				}
			}
			if err := bn(at, n[0]); err != nil {
				return nil, err
			}
			r.Op = opFoldBias
			r.setView([]int64{n[0]})
		default:
			return nil, r.errf("%s with role %q (want weight or bias)", r.Main, o.Role)
		}
	case plan.TFoldBNInput:
		w := infos[0]
		if len(w.Shape) != 2 {
			return nil, r.errf("fold-bn-input weight %q has shape %v, want 2-D [out, in]", w.Name, w.Shape)
		}
		out, in := w.Shape[0], w.Shape[1]
		switch o.Role {
		case "weight":
			if err := bn(1, in); err != nil {
				return nil, err
			}
			r.Op, r.Parts = opFoldCols, []string{w.Name}
			r.setView(w.Shape)
		case "bias":
			at := 1
			if len(infos) == 6 {
				if err := vec(1, out, "bias"); err != nil {
					return nil, err
				}
				r.Bias, at = infos[1].Name, 2
			}
			if err := bn(at, in); err != nil {
				return nil, err
			}
			r.Op, r.W = opFoldInBias, w.Name
			r.setView([]int64{out})
		default:
			return nil, r.errf("%s with role %q (want weight or bias)", r.Main, o.Role)
		}
	}

	// dtypes
	r.InDT = infos[0].DType
	for _, s := range infos {
		if r.Op == opCopy && s.DType != r.InDT {
			if r.CastTo == "" {
				return nil, r.errf("sources mix dtypes %s and %s without a cast", r.InDT, s.DType)
			}
		}
		if (r.Op != opCopy || r.CastTo != "") && !decodable(s.DType) {
			return nil, r.errf("source %q has dtype %s; folding and casting read F32, F16, BF16 only", s.Name, s.DType)
		}
		if r.Op == opCopy && s.DType.Size() == 0 {
			return nil, r.errf("source %q has unknown dtype %q", s.Name, s.DType)
		}
	}
	r.OutDT = r.InDT
	if r.CastTo != "" {
		r.OutDT = r.CastTo
	}
	if r.Op == opAddOne {
		r.OutDT = models.F32
	}
	if r.Op == opCopy {
		mixed := false
		for _, s := range infos {
			mixed = mixed || s.DType != infos[0].DType
		}
		r.Raw = !mixed && r.InDT == r.OutDT
	}
	if o.DType != string(r.OutDT) {
		return nil, r.errf("plan dtype %s, but sources %s with transforms %v give %s", o.DType, r.InDT, o.Transforms, r.OutDT)
	}
	if r.KMajor && len(r.viewShape) != 2 {
		return nil, r.errf("prepack-kmajor needs a 2-D [N, K] tensor, got shape %v", r.viewShape)
	}
	shape := r.finalShape()
	if !slices.Equal(shape, o.Shape) {
		return nil, r.errf("plan shape %v, sources and transforms give %v", o.Shape, shape)
	}
	return r, nil
}

// setView remembers the pre-transpose view: 2-D [rows, cols], 1-D [n] as [n, 1],
// N-D as [d0, d1·d2·...], 0-D as [1, 1].
func (r *recipe) setView(shape []int64) {
	r.viewShape = slices.Clone(shape)
	switch len(shape) {
	case 0:
		r.Rows, r.Cols = 1, 1
	case 1:
		r.Rows, r.Cols = shape[0], 1
	default:
		r.Rows, r.Cols = shape[0], 1
		for _, d := range shape[1:] {
			r.Cols *= d
		}
	}
}

func (r *recipe) finalShape() []int64 {
	if r.KMajor {
		return []int64{r.viewShape[1], r.viewShape[0]}
	}
	return slices.Clone(r.viewShape)
}
