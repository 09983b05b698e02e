package pack

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// ---- synthetic checkpoints ----

// stensor is a synthetic source tensor; vals holds its exact values (already rounded
// to dt, so references can use them directly).
type stensor struct {
	name  string
	dt    models.DType
	shape []int64
	vals  []float64
	raw   []byte
}

func elems(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

// mkTensor fills a tensor with values from gen (rounded to dt).
func mkTensor(name string, dt models.DType, shape []int64, gen func(i int) float64) *stensor {
	n := elems(shape)
	t := &stensor{name: name, dt: dt, shape: shape, vals: make([]float64, n), raw: make([]byte, n*dt.Size())}
	src := make([]float64, n)
	for i := range src {
		src[i] = gen(i)
	}
	if !decodable(dt) { // other dtypes: zero bytes, never decoded
		return t
	}
	if err := EncodeF64(t.raw, src, dt); err != nil {
		panic(err)
	}
	if err := DecodeF64(t.vals, t.raw, dt); err != nil {
		panic(err)
	}
	return t
}

func randGen(seed uint64, lo, hi float64) func(int) float64 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(int) float64 { return lo + (hi-lo)*r.Float64() }
}

// writeST writes tensors (in the given order) into a safetensors file.
func writeST(t testing.TB, path string, ts []*stensor) {
	t.Helper()
	hs := make([]*models.Tensor, len(ts))
	for i, s := range ts {
		hs[i] = &models.Tensor{Name: s.name, DType: s.dt, Shape: s.shape}
	}
	var b bytes.Buffer
	if _, err := models.WriteHeader(&b, hs, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range ts {
		b.Write(s.raw)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeCheckpoint writes a checkpoint folder (one file per group) and opens it.
func writeCheckpoint(t testing.TB, dir string, groups ...[]*stensor) *models.Checkpoint {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, g := range groups {
		writeST(t, filepath.Join(dir, fmt.Sprintf("part%d.safetensors", i)), g)
	}
	ck, err := models.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// readPacked reads every tensor of a packed folder: name -> (header tensor, bytes).
type packedTensor struct {
	t    *models.Tensor
	data []byte
	file string
}

func readPacked(t testing.TB, dir string) (map[string]packedTensor, map[string]map[string]string) {
	t.Helper()
	files, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]packedTensor{}
	metas := map[string]map[string]string{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, err := models.ReadHeader(bytes.NewReader(b), int64(len(b)), p)
		if err != nil {
			t.Fatal(err)
		}
		metas[filepath.Base(p)] = h.Metadata
		for _, ht := range h.Tensors {
			out[ht.Name] = packedTensor{ht, b[ht.Offset : ht.Offset+ht.Size], filepath.Base(p)}
		}
	}
	return out, metas
}

func bf16Vals(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

// ---- references, written the plain way ----

func refCast(vals []float64) []uint16 {
	out := make([]uint16, len(vals))
	for i, x := range vals {
		out[i] = BF16FromF64(x)
	}
	return out
}

// refT transposes a row-major [n, k] matrix.
func refT[T any](v []T, n, k int) []T {
	out := make([]T, len(v))
	for i := 0; i < n; i++ {
		for j := 0; j < k; j++ {
			out[j*n+i] = v[i*k+j]
		}
	}
	return out
}

func bnA(g, v *stensor, eps float64, i int) float64 { return g.vals[i] / math.Sqrt(v.vals[i]+eps) }

func wantU16(t *testing.T, name string, got []uint16, want []uint16) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", name, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s[%d] = %#04x, want %#04x (and maybe more)", name, i, got[i], want[i])
		}
	}
}

// ---- the main end-to-end pack test ----

type fixture struct {
	ck   *models.Checkpoint
	src  map[string]*stensor
	plan *plan.Plan
	eps  float64
}

// newFixture builds a checkpoint covering every PLAN.md row and dtype path.
func newFixture(t testing.TB, dir string) *fixture {
	const eps = 1e-5
	f := &fixture{src: map[string]*stensor{}, eps: eps}
	add := func(ts ...*stensor) []*stensor {
		for _, s := range ts {
			f.src[s.name] = s
		}
		return ts
	}
	g := randGen
	bnset := func(p string, n int64, dt models.DType, seed uint64) []*stensor {
		return add(
			mkTensor(p+".bn.weight", dt, []int64{n}, g(seed, 0.5, 2)),
			mkTensor(p+".bn.bias", dt, []int64{n}, g(seed+1, -1, 1)),
			mkTensor(p+".bn.running_mean", dt, []int64{n}, g(seed+2, -1, 1)),
			mkTensor(p+".bn.running_var", dt, []int64{n}, g(seed+3, 0, 3)),
		)
	}
	var g1, g2 []*stensor
	// attention, F32: q [24,16], k,v [8,16] with biases; o [16,24]
	g1 = append(g1, add(
		mkTensor("attn.q.weight", models.F32, []int64{24, 16}, g(1, -1, 1)),
		mkTensor("attn.k.weight", models.F32, []int64{8, 16}, g(2, -1, 1)),
		mkTensor("attn.v.weight", models.F32, []int64{8, 16}, g(3, -1, 1)),
		mkTensor("attn.q.bias", models.F32, []int64{24}, g(4, -1, 1)),
		mkTensor("attn.k.bias", models.F32, []int64{8}, g(5, -1, 1)),
		mkTensor("attn.v.bias", models.F32, []int64{8}, g(6, -1, 1)),
		mkTensor("attn.o.weight", models.F32, []int64{16, 24}, g(7, -1, 1)),
		mkTensor("norm.weight", models.F16, []int64{16}, g(8, 0, 2)),
	)...)
	// mlp in BF16 (no cast: bytes rearranged), gate/up [40,16]
	g2 = append(g2, add(
		mkTensor("mlp.gate.weight", models.BF16, []int64{40, 16}, g(9, -1, 1)),
		mkTensor("mlp.up.weight", models.BF16, []int64{40, 16}, g(10, -1, 1)),
		mkTensor("mlp.down.weight", models.BF16, []int64{16, 40}, g(11, -1, 1)),
		mkTensor("keep.weight", models.I32, []int64{3}, func(i int) float64 { return 0 }), // never read
	)...)
	// linear-bn (F32 with bias), linear-bn without bias (F16), bn-linear (F32), conv-bn (BF16)
	g2 = append(g2, add(
		mkTensor("lbn.linear.weight", models.F32, []int64{12, 20}, g(12, -1, 1)),
		mkTensor("lbn.linear.bias", models.F32, []int64{12}, g(13, -1, 1)),
	)...)
	g2 = append(g2, bnset("lbn", 12, models.F32, 20)...)
	g1 = append(g1, add(mkTensor("lbn16.linear.weight", models.F16, []int64{6, 10}, g(14, -1, 1)))...)
	g1 = append(g1, bnset("lbn16", 6, models.F16, 30)...)
	g1 = append(g1, add(
		mkTensor("head.linear.weight", models.F32, []int64{10, 12}, g(15, -1, 1)),
		mkTensor("head.linear.bias", models.F32, []int64{10}, g(16, -1, 1)),
	)...)
	g1 = append(g1, bnset("head", 12, models.F32, 40)...)
	g1 = append(g1, add(mkTensor("head2.linear.weight", models.F32, []int64{5, 12}, g(17, -1, 1)))...)
	g1 = append(g1, bnset("head2", 12, models.F32, 50)...)
	g2 = append(g2, add(mkTensor("conv.conv.weight", models.BF16, []int64{8, 3, 3, 3}, g(18, -1, 1)))...)
	g2 = append(g2, bnset("conv", 8, models.BF16, 60)...)
	f.ck = writeCheckpoint(t, dir, g1, g2)

	bnNames := func(p string) []string {
		return []string{p + ".bn.weight", p + ".bn.bias", p + ".bn.running_mean", p + ".bn.running_var"}
	}
	cat := func(a []string, b ...string) []string { return append(slices.Clone(a), b...) }
	f.plan = &plan.Plan{Schema: plan.SchemaVersion, Tool: "xpuinject test", Source: plan.Source{Path: dir}, Arch: "llama",
		Layers: []plan.LayerPlan{
			{Module: "attn", Kind: "attention", Kernel: "attention-prefill", Outputs: []plan.TensorPlan{
				{Name: "attn.qkv_proj.weight", Role: "weight", Sources: []string{"attn.q.weight", "attn.k.weight", "attn.v.weight"},
					Transforms: []string{plan.TConcatQKV, plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{16, 40}, DType: "BF16", Layout: plan.LayoutKMajor, Split: []int64{24, 8, 8}},
				{Name: "attn.qkv_proj.bias", Role: "bias", Sources: []string{"attn.q.bias", "attn.k.bias", "attn.v.bias"},
					Transforms: []string{plan.TConcatQKV, plan.TCastBF16}, Shape: []int64{40}, DType: "BF16", Layout: plan.LayoutRowMajor, Split: []int64{24, 8, 8}},
				{Name: "attn.o_proj.weight", Sources: []string{"attn.o.weight"},
					Transforms: []string{plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{24, 16}, DType: "BF16", Layout: plan.LayoutKMajor},
			}},
			{Module: "norm", Kind: "rmsnorm", Kernel: "rmsnorm", Outputs: []plan.TensorPlan{
				{Name: "norm.weight", Sources: []string{"norm.weight"}, Transforms: []string{plan.TCastBF16}, Shape: []int64{16}, DType: "BF16", Layout: plan.LayoutRowMajor},
			}},
			{Module: "mlp", Kind: "mlp-swiglu", Kernel: "gemm", Outputs: []plan.TensorPlan{
				{Name: "mlp.gate_up_proj.weight", Role: "weight", Sources: []string{"mlp.gate.weight", "mlp.up.weight"},
					Transforms: []string{plan.TConcatGateUp, plan.TPrepackKMajor}, Shape: []int64{16, 80}, DType: "BF16", Layout: plan.LayoutKMajor, Split: []int64{40, 40}},
				{Name: "mlp.down_proj.weight", Sources: []string{"mlp.down.weight"},
					Transforms: []string{plan.TPrepackKMajor}, Shape: []int64{40, 16}, DType: "BF16", Layout: plan.LayoutKMajor},
				{Name: "mlp.down_proj.copy", Sources: []string{"mlp.down.weight"}, Shape: []int64{16, 40}, DType: "BF16", Layout: plan.LayoutRowMajor},
			}},
			{Module: "keep", Kind: "embedding", Kernel: plan.KernelKeep},
			{Module: "lbn", Kind: "linear-bn", Kernel: "gemm", Eps: eps, Outputs: []plan.TensorPlan{
				{Name: "lbn.folded.weight", Role: "weight", Sources: cat([]string{"lbn.linear.weight"}, bnNames("lbn")...),
					Transforms: []string{plan.TFoldBN, plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{20, 12}, DType: "BF16", Layout: plan.LayoutKMajor},
				{Name: "lbn.folded.bias", Role: "bias", Sources: cat([]string{"lbn.linear.bias"}, bnNames("lbn")...),
					Transforms: []string{plan.TFoldBN, plan.TCastBF16}, Shape: []int64{12}, DType: "BF16", Layout: plan.LayoutRowMajor},
			}},
			{Module: "lbn16", Kind: "linear-bn", Kernel: "gemm", Eps: eps, Outputs: []plan.TensorPlan{
				// no cast: the fold result stays F16 (one rounding from float64)
				{Name: "lbn16.folded.weight", Role: "weight", Sources: cat([]string{"lbn16.linear.weight"}, bnNames("lbn16")...),
					Transforms: []string{plan.TFoldBN}, Shape: []int64{6, 10}, DType: "F16", Layout: plan.LayoutRowMajor},
				{Name: "lbn16.folded.bias", Role: "bias", Sources: bnNames("lbn16"),
					Transforms: []string{plan.TFoldBN, plan.TCastBF16}, Shape: []int64{6}, DType: "BF16", Layout: plan.LayoutRowMajor},
			}},
			{Module: "head", Kind: "bn-linear", Kernel: "gemm", Eps: eps, Outputs: []plan.TensorPlan{
				{Name: "head.folded.weight", Role: "weight", Sources: cat([]string{"head.linear.weight"}, bnNames("head")...),
					Transforms: []string{plan.TFoldBNInput, plan.TCastBF16, plan.TPrepackKMajor}, Shape: []int64{12, 10}, DType: "BF16", Layout: plan.LayoutKMajor},
				{Name: "head.folded.bias", Role: "bias", Sources: cat([]string{"head.linear.weight", "head.linear.bias"}, bnNames("head")...),
					Transforms: []string{plan.TFoldBNInput, plan.TCastBF16}, Shape: []int64{10}, DType: "BF16", Layout: plan.LayoutRowMajor},
			}},
			{Module: "head2", Kind: "bn-linear", Kernel: "gemm", Eps: eps, Outputs: []plan.TensorPlan{
				{Name: "head2.folded.bias", Role: "bias", Sources: cat([]string{"head2.linear.weight"}, bnNames("head2")...),
					Transforms: []string{plan.TFoldBNInput}, Shape: []int64{5}, DType: "F32", Layout: plan.LayoutRowMajor},
			}},
			{Module: "conv", Kind: "conv-bn", Kernel: plan.KernelKeep, Eps: eps, Outputs: []plan.TensorPlan{
				{Name: "conv.folded.weight", Role: "weight", Sources: cat([]string{"conv.conv.weight"}, bnNames("conv")...),
					Transforms: []string{plan.TFoldConvBN, plan.TCastBF16}, Shape: []int64{8, 3, 3, 3}, DType: "BF16", Layout: plan.LayoutRowMajor},
				{Name: "conv.folded.bias", Role: "bias", Sources: bnNames("conv"),
					Transforms: []string{plan.TFoldConvBN, plan.TCastBF16}, Shape: []int64{8}, DType: "BF16", Layout: plan.LayoutRowMajor},
			}},
		}}
	return f
}

// expected computes every output of newFixture's plan with plain loops in float64.
func (f *fixture) expected() map[string][]byte {
	s := f.src
	out := map[string][]byte{}
	u16 := func(v []uint16) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], x)
		}
		return b
	}
	concat := func(names ...string) []float64 {
		var v []float64
		for _, n := range names {
			v = append(v, s[n].vals...)
		}
		return v
	}
	out["attn.qkv_proj.weight"] = u16(refT(refCast(concat("attn.q.weight", "attn.k.weight", "attn.v.weight")), 40, 16))
	out["attn.qkv_proj.bias"] = u16(refCast(concat("attn.q.bias", "attn.k.bias", "attn.v.bias")))
	out["attn.o_proj.weight"] = u16(refT(refCast(s["attn.o.weight"].vals), 16, 24))
	out["norm.weight"] = u16(refCast(s["norm.weight"].vals))
	gu := append(slices.Clone(s["mlp.gate.weight"].raw), s["mlp.up.weight"].raw...)
	out["mlp.gate_up_proj.weight"] = u16(refT(bf16Vals(gu), 80, 16))
	out["mlp.down_proj.weight"] = u16(refT(bf16Vals(s["mlp.down.weight"].raw), 16, 40))
	out["mlp.down_proj.copy"] = slices.Clone(s["mlp.down.weight"].raw)

	eps := f.eps
	foldRows := func(w string, p string, rows, cols int) []float64 {
		v := make([]float64, rows*cols)
		for i := 0; i < rows; i++ {
			a := bnA(s[p+".bn.weight"], s[p+".bn.running_var"], eps, i)
			for j := 0; j < cols; j++ {
				v[i*cols+j] = s[w].vals[i*cols+j] * a
			}
		}
		return v
	}
	foldBias := func(b string, p string, n int) []float64 {
		v := make([]float64, n)
		for i := 0; i < n; i++ {
			a := bnA(s[p+".bn.weight"], s[p+".bn.running_var"], eps, i)
			bi := 0.0
			if b != "" {
				bi = s[b].vals[i]
			}
			v[i] = a*(bi-s[p+".bn.running_mean"].vals[i]) + s[p+".bn.bias"].vals[i]
		}
		return v
	}
	out["lbn.folded.weight"] = u16(refT(refCast(foldRows("lbn.linear.weight", "lbn", 12, 20)), 12, 20))
	out["lbn.folded.bias"] = u16(refCast(foldBias("lbn.linear.bias", "lbn", 12)))
	fw := foldRows("lbn16.linear.weight", "lbn16", 6, 10)
	h := make([]uint16, len(fw))
	for i, x := range fw {
		h[i] = F16FromF64(x)
	}
	out["lbn16.folded.weight"] = u16(h)
	out["lbn16.folded.bias"] = u16(refCast(foldBias("", "lbn16", 6)))
	// bn-linear: W' = W·diag(s); b' = b + W·(β − s·μ)
	inFold := func(w, b, p string, rows, cols int) ([]float64, []float64) {
		wv := make([]float64, rows*cols)
		bv := make([]float64, rows)
		for i := 0; i < rows; i++ {
			if b != "" {
				bv[i] = s[b].vals[i]
			}
			for j := 0; j < cols; j++ {
				sj := bnA(s[p+".bn.weight"], s[p+".bn.running_var"], eps, j)
				wv[i*cols+j] = s[w].vals[i*cols+j] * sj
				bv[i] += s[w].vals[i*cols+j] * (s[p+".bn.bias"].vals[j] - sj*s[p+".bn.running_mean"].vals[j])
			}
		}
		return wv, bv
	}
	hw, hb := inFold("head.linear.weight", "head.linear.bias", "head", 10, 12)
	out["head.folded.weight"] = u16(refT(refCast(hw), 10, 12))
	out["head.folded.bias"] = u16(refCast(hb))
	_, h2b := inFold("head2.linear.weight", "", "head2", 5, 12)
	b32 := make([]byte, 4*len(h2b))
	for i, x := range h2b {
		binary.LittleEndian.PutUint32(b32[4*i:], math.Float32bits(float32(x)))
	}
	out["head2.folded.bias"] = b32
	out["conv.folded.weight"] = u16(refCast(foldRows("conv.conv.weight", "conv", 8, 27)))
	out["conv.folded.bias"] = u16(refCast(foldBias("", "conv", 8)))
	return out
}

func TestPackMatchesReference(t *testing.T) {
	for _, bb := range []int64{1 << 20, 64} { // default blocks, and tiny ones (many blocks, both workers busy)
		t.Run(fmt.Sprintf("block%d", bb), func(t *testing.T) {
			old := packBlockBytes
			packBlockBytes = bb
			defer func() { packBlockBytes = old }()
			dir := t.TempDir()
			f := newFixture(t, filepath.Join(dir, "src"))
			out := filepath.Join(dir, "out")
			var progress []Progress
			res, err := Write(context.Background(), f.ck, f.plan, out, Options{Tool: "xpuinject test", Workers: 2,
				Progress: func(p Progress) { progress = append(progress, p) }})
			if err != nil {
				t.Fatal(err)
			}
			want := f.expected()
			got, metas := readPacked(t, out)
			if len(got) != len(want) {
				t.Errorf("packed %d tensors, want %d (exactly the plan's outputs)", len(got), len(want))
			}
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					t.Errorf("tensor %q missing", name)
					continue
				}
				if !bytes.Equal(g.data, w) {
					t.Errorf("tensor %q: bytes differ from the float64 reference", name)
				}
			}
			if _, ok := got["keep.weight"]; ok {
				t.Error("kept tensor keep.weight was written")
			}
			// header dtypes and shapes are the plan's
			for _, l := range f.plan.Layers {
				for _, o := range l.Outputs {
					if g := got[o.Name]; g.t != nil && (string(g.t.DType) != o.DType || !slices.Equal(g.t.Shape, o.Shape)) {
						t.Errorf("tensor %q: header %s %v, plan %s %v", o.Name, g.t.DType, g.t.Shape, o.DType, o.Shape)
					}
				}
			}
			if !slices.Equal(res.Files, []string{"model.safetensors", "plan.yaml"}) {
				t.Errorf("files %v", res.Files)
			}
			m := metas["model.safetensors"]
			if m["format"] != "pt" || m[MetaTool] != "xpuinject test" || m[MetaSource] != filepath.Join(dir, "src") ||
				m[MetaPlanSHA256] != res.PlanSHA256 || m[MetaSchemaVersion] != strconv.Itoa(plan.SchemaVersion) {
				t.Errorf("metadata %v", m)
			}
			if m[MetaTransforms] != "cast-bf16,concat-gate-up,concat-qkv,fold-bn,fold-bn-input,fold-conv-bn,prepack-kmajor" {
				t.Errorf("transforms metadata %q", m[MetaTransforms])
			}
			var sums map[string]string
			if err := json.Unmarshal([]byte(m[MetaSourceSHA256]), &sums); err != nil || len(sums) != 2 {
				t.Errorf("source sha256 %q: %v", m[MetaSourceSHA256], err)
			}
			if want, _ := fileSHA256(context.Background(), filepath.Join(dir, "src", "part0.safetensors")); sums["part0.safetensors"] != want {
				t.Errorf("sha256 of part0: %q, want %q", sums["part0.safetensors"], want)
			}
			py, err := os.ReadFile(filepath.Join(out, "plan.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			back, err := plan.ParseYAML(py)
			if err != nil || len(back.Layers) != len(f.plan.Layers) {
				t.Errorf("plan.yaml does not read back: %v", err)
			}
			if len(progress) != len(want) || progress[len(progress)-1].Index != len(want) ||
				progress[len(progress)-1].Bytes != res.OutputBytes {
				t.Errorf("progress %+v", progress[len(progress)-1])
			}
			if ents, _ := os.ReadDir(out); len(ents) != 3 {
				t.Errorf("output folder holds %d entries, want the shard, plan.yaml and the marker", len(ents))
			}
			if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 2 {
				t.Errorf("%d entries beside the output, want src and out (no temporaries)", len(ents))
			}
		})
	}
}

// TestPackHeaderOrder checks the data layout rule: by descending dtype, then name, and
// 8-byte padded headers, as safetensors' own writer does.
func TestPackHeaderOrder(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	out := filepath.Join(dir, "out")
	if _, err := Write(context.Background(), f.ck, f.plan, out, Options{}); err != nil {
		t.Fatal(err)
	}
	got, _ := readPacked(t, out)
	var ts []*models.Tensor
	for _, g := range got {
		ts = append(ts, g.t)
	}
	slices.SortFunc(ts, func(a, b *models.Tensor) int { return int(a.Offset - b.Offset) })
	var order []string
	for _, x := range ts {
		order = append(order, string(x.DType)+":"+x.Name)
	}
	want := []string{"F32:head2.folded.bias"}
	var bf []string
	for n, g := range got {
		if g.t.DType == "BF16" {
			bf = append(bf, "BF16:"+n)
		}
	}
	slices.Sort(bf)
	want = append(want, bf...)
	want = append(want, "F16:lbn16.folded.weight")
	if !slices.Equal(order, want) {
		t.Errorf("data order\n got %v\nwant %v", order, want)
	}
	b, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 || b[8+n-1] != ' ' && b[8+n-1] != '}' {
		t.Errorf("header length %d not a multiple of 8 or not space-padded", n)
	}
}

func TestPackShardsAndDeterminism(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	opts := Options{MaxShardSize: 1000, Tool: "t"}
	ra, err := Write(context.Background(), f.ck, f.plan, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), f.ck, f.plan, b, Options{MaxShardSize: 1000, Tool: "t", Workers: 1}); err != nil {
		t.Fatal(err)
	}
	if len(ra.Files) < 4 || ra.Files[len(ra.Files)-2] != IndexFile || ra.Files[len(ra.Files)-1] != plan.FileName {
		t.Fatalf("files %v: want several shards, then the index, then plan.yaml", ra.Files)
	}
	nShards := len(ra.Files) - 2
	for i, fn := range ra.Files[:nShards] {
		if want := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, nShards); fn != want {
			t.Errorf("shard %d named %s, want %s", i, fn, want)
		}
	}
	for _, fn := range ra.Files {
		x, _ := os.ReadFile(filepath.Join(a, fn))
		y, _ := os.ReadFile(filepath.Join(b, fn))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs (or is empty)", fn)
		}
	}
	// the index
	var idx struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	ib, _ := os.ReadFile(filepath.Join(a, IndexFile))
	if err := json.Unmarshal(ib, &idx); err != nil {
		t.Fatal(err)
	}
	got, metas := readPacked(t, a)
	var total int64
	for n, g := range got {
		total += g.t.Size
		if idx.WeightMap[n] != g.file {
			t.Errorf("index maps %q to %q, it is in %q", n, idx.WeightMap[n], g.file)
		}
	}
	if idx.Metadata["total_size"] != total || len(idx.WeightMap) != len(got) {
		t.Errorf("index total_size %d (want %d), %d entries (want %d)", idx.Metadata["total_size"], total, len(idx.WeightMap), len(got))
	}
	// every shard: ≤ 1000 tensor bytes unless it holds a single tensor; same metadata
	perFile := map[string][]int64{}
	for _, g := range got {
		perFile[g.file] = append(perFile[g.file], g.t.Size)
	}
	for fn, sizes := range perFile {
		var s int64
		for _, x := range sizes {
			s += x
		}
		if s > 1000 && len(sizes) > 1 {
			t.Errorf("%s holds %d tensor bytes in %d tensors, limit 1000", fn, s, len(sizes))
		}
		if fmt.Sprint(metas[fn]) != fmt.Sprint(ra.Metadata) {
			t.Errorf("%s metadata %v, want %v", fn, metas[fn], ra.Metadata)
		}
	}
	// re-pack into a, unsharded: stale shards and the index go, bytes equal a fresh pack
	if _, err := Write(context.Background(), f.ck, f.plan, a, Options{Tool: "t"}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(a)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{outdir.MarkerFile, "model.safetensors", "plan.yaml"}) {
		t.Errorf("after re-pack unsharded, folder holds %v", names)
	}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"5GB", 5_000_000_000}, {"500MB", 500_000_000}, {"2GiB", 2 << 30}, {"1000", 1000}, {"10kb", 10_000},
		{"1.5GB", 1_500_000_000}, {" 3 MiB ", 3 << 20}, {"7B", 7}, {"1TB", 1e12},
	} {
		if got, err := ParseSize(c.in); err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GB", "-5GB", "5XB", "0", "1.5", "0.0000001KB", "5 G B"} {
		if got, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", bad, got)
		}
	}
}

// ---- bad inputs ----

func TestPackBadInputs(t *testing.T) {
	dir := t.TempDir()
	base := newFixture(t, filepath.Join(dir, "src"))
	mutate := func(fn func(p *plan.Plan)) *plan.Plan {
		b, _ := plan.MarshalJSON(base.plan)
		var p plan.Plan
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		fn(&p)
		return &p
	}
	find := func(p *plan.Plan, name string) *plan.TensorPlan {
		for i := range p.Layers {
			for j := range p.Layers[i].Outputs {
				if p.Layers[i].Outputs[j].Name == name {
					return &p.Layers[i].Outputs[j]
				}
			}
		}
		t.Fatalf("no output %s", name)
		return nil
	}
	cases := []struct {
		name string
		plan *plan.Plan
		want []string
	}{
		{"concat shape mismatch", mutate(func(p *plan.Plan) {
			find(p, "attn.qkv_proj.weight").Sources[1] = "attn.o.weight"
		}), []string{"attn.qkv_proj.weight", "layer attn", "shape mismatch"}},
		{"plan shape wrong", mutate(func(p *plan.Plan) { find(p, "attn.o_proj.weight").Shape = []int64{16, 24} }),
			[]string{"attn.o_proj.weight", "plan shape [16 24]", "[24 16]"}},
		{"plan dtype wrong", mutate(func(p *plan.Plan) { find(p, "norm.weight").DType = "F16" }),
			[]string{"norm.weight", "plan dtype F16"}},
		{"unknown transform", mutate(func(p *plan.Plan) { find(p, "norm.weight").Transforms = []string{"quantize-int4"} }),
			[]string{"norm.weight", `"quantize-int4" is unknown or out of order`}},
		{"misordered transforms", mutate(func(p *plan.Plan) {
			find(p, "attn.o_proj.weight").Transforms = []string{plan.TPrepackKMajor, plan.TCastBF16}
		}), []string{"out of order"}},
		{"missing source", mutate(func(p *plan.Plan) { find(p, "norm.weight").Sources = []string{"nope"} }),
			[]string{`source "nope" is not in the checkpoint`}},
		{"int dtype cast", mutate(func(p *plan.Plan) {
			o := find(p, "norm.weight")
			o.Sources = []string{"keep.weight"}
			o.Shape = []int64{3}
		}), []string{"keep.weight", "dtype I32"}},
		{"bn vector wrong length", mutate(func(p *plan.Plan) {
			find(p, "lbn.folded.weight").Sources[4] = "lbn16.bn.running_var"
		}), []string{"lbn.folded.weight", "running_var", "want [12]"}},
		{"layout disagrees", mutate(func(p *plan.Plan) { find(p, "attn.o_proj.weight").Layout = plan.LayoutRowMajor }),
			[]string{"layout"}},
		{"duplicate output", mutate(func(p *plan.Plan) {
			p.Layers[1].Outputs = append(p.Layers[1].Outputs, p.Layers[1].Outputs[0])
		}), []string{"planned by both"}},
		{"split wrong", mutate(func(p *plan.Plan) { find(p, "attn.qkv_proj.weight").Split = []int64{8, 8, 24} }),
			[]string{"split"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			_, err := Write(context.Background(), base.ck, c.plan, out, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrTransform) {
				t.Errorf("error %v is not ErrTransform", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("output folder created for a plan that fails its checks")
			}
		})
	}
}

// TestPackBadBatchNorm: NaN and negative running variances are caught when the fold
// reads them, with the tensor, channel and layer named, and nothing is left behind.
func TestPackBadBatchNorm(t *testing.T) {
	for _, c := range []struct {
		name string
		v    float64
		want string
	}{
		{"nan", math.NaN(), "is NaN at channel 3"},
		{"negative", -0.5, "is negative (-0.5) at channel 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			base := newFixture(t, filepath.Join(dir, "src"))
			// rewrite lbn.bn.running_var with a bad channel 3
			v := base.src["lbn.bn.running_var"]
			v.vals[3] = c.v
			if err := EncodeF64(v.raw, v.vals, v.dt); err != nil {
				t.Fatal(err)
			}
			tt := base.ck.Tensors["lbn.bn.running_var"]
			fh, err := os.OpenFile(tt.File, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fh.WriteAt(v.raw, tt.Offset); err != nil {
				t.Fatal(err)
			}
			fh.Close()
			out := filepath.Join(dir, "out")
			_, err = Write(context.Background(), base.ck, base.plan, out, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range []string{`running_var "lbn.bn.running_var"`, c.want, "layer lbn", "lbn.folded."} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !errors.Is(err, ErrTransform) {
				t.Errorf("error is not ErrTransform: %v", err)
			}
			assertNoPack(t, out)
		})
	}
}

// assertNoPack: an output folder that must not look like a packed checkpoint.
func assertNoPack(t *testing.T, out string) {
	t.Helper()
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		t.Errorf("output folder holds %s after a failed pack", e.Name())
	}
}

// failFile fails every write once more than limit bytes were written (a full disk).
type failFile struct {
	*os.File
	limit, n int64
}

func (f *failFile) WriteAt(b []byte, off int64) (int, error) {
	if f.n+int64(len(b)) > f.limit {
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	f.n += int64(len(b))
	return f.File.WriteAt(b, off)
}

func TestPackDiskFull(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	for _, limit := range []int64{0, 100, 2000, 3000} {
		out := filepath.Join(dir, fmt.Sprint("out", limit))
		_, err := Write(context.Background(), f.ck, f.plan, out, Options{MaxShardSize: 1200,
			create: func(p string) (packFile, error) {
				fh, err := createFile(p)
				if err != nil {
					return nil, err
				}
				return &failFile{File: fh.(*os.File), limit: limit}, nil
			}})
		if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrWrite) {
			t.Fatalf("limit %d: error %v, want ErrWrite wrapping ENOSPC", limit, err)
		}
		if !strings.Contains(err.Error(), ".safetensors: no space left on device") {
			t.Errorf("limit %d: error %q does not name the file", limit, err)
		}
		assertNoPack(t, out)
	}
}

func TestPackUnwritableOutput(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// a path below a regular file cannot be created, by root either
	_, err := Write(context.Background(), f.ck, f.plan, filepath.Join(file, "out"), Options{})
	if err == nil || !errors.Is(err, ErrWrite) || !strings.Contains(err.Error(), "output folder") {
		t.Errorf("error %v, want ErrWrite naming the output folder", err)
	}
	// the source folder itself
	_, err = Write(context.Background(), f.ck, f.plan, filepath.Join(dir, "src", "."), Options{})
	if !errors.Is(err, outdir.ErrRefused) || !strings.Contains(err.Error(), "is the source checkpoint") {
		t.Errorf("packing into the source folder: error %v", err)
	}
	if _, err := os.Stat(f.ck.Files[0]); err != nil {
		t.Errorf("source file gone: %v", err)
	}
	// a read-only folder (meaningful when not root: root writes anyway)
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	_, err = Write(context.Background(), f.ck, f.plan, ro, Options{})
	if os.Geteuid() != 0 {
		if err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only folder: error %v", err)
		}
	} else if err != nil {
		t.Errorf("as root the read-only folder is writable, pack failed: %v", err)
	}
}

// TestPackInterrupted: a cancelled run fails with context.Canceled and leaves an earlier
// complete pack in the same folder untouched.
func TestPackInterrupted(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	out := filepath.Join(dir, "out")
	if _, err := Write(context.Background(), f.ck, f.plan, out, Options{}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := Write(ctx, f.ck, f.plan, out, Options{MaxShardSize: 800, Progress: func(Progress) {
		if n++; n == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	after, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
	if !bytes.Equal(before, after) {
		t.Error("the earlier pack was changed by the interrupted run")
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 3 {
		t.Errorf("folder holds %d entries after the interrupted run, want the earlier 3", len(ents))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d entries beside the output after the interrupted run, want src and out", len(ents))
	}
}

// TestPackRefusesForeignFolder: a folder xpuinject did not write is never replaced, nor
// one of another kind, nor an earlier pack when NoReplace is set; nothing in it changes.
func TestPackRefusesForeignFolder(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	other := filepath.Join(dir, "other-model")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", IndexFile} {
		if err := os.WriteFile(filepath.Join(other, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Write(context.Background(), f.ck, f.plan, other, Options{})
	if !errors.Is(err, outdir.ErrRefused) || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("error %v, want a refusal", err)
	}
	for _, n := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", IndexFile} {
		if b, err := os.ReadFile(filepath.Join(other, n)); err != nil || string(b) != n {
			t.Errorf("%s changed: %q, %v", n, b, err)
		}
	}
	out := filepath.Join(dir, "out")
	if _, err := Write(context.Background(), f.ck, f.plan, out, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), f.ck, f.plan, out, Options{NoReplace: true}); !errors.Is(err, outdir.ErrExists) {
		t.Errorf("NoReplace over an earlier pack: %v", err)
	}
}

func TestPackTruncatedSource(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, filepath.Join(dir, "src"))
	tt := f.ck.Tensors["attn.q.weight"]
	if err := os.Truncate(tt.File, tt.Offset+10); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	_, err := Write(context.Background(), f.ck, f.plan, out, Options{})
	if err == nil || !strings.Contains(err.Error(), "part0.safetensors") || !strings.Contains(err.Error(), "is outside the file") {
		t.Fatalf("error %v, want one naming the truncated file", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("output folder created although a source is truncated (extents are checked first)")
	}
}
