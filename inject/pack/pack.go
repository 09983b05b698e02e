// Package pack computes the tensors a plan asks for (BatchNorm folded, q/k/v and gate/up
// concatenated, cast, K-major) and writes them as a safetensors checkpoint with the plan,
// streaming in row blocks; Verify checks a packed folder against a plan. The transforms
// (transform.go, bf16.go) are pure functions, table-tested.
package pack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

// The packed checkpoint holds exactly the plan's output tensors (every TensorPlan of
// every layer), nothing else: the shim loads these into the modules it replaces and the
// model keeps its own weights for every layer it does not replace, so copying kept
// tensors would only double the download.
//
// Files, all in the output folder:
//   - model.safetensors, or model-0000i-of-0000N.safetensors shards of at most
//     MaxShardSize tensor bytes each plus model.safetensors.index.json (the layout
//     transformers' save_pretrained writes);
//   - plan.yaml, the plan the tensors were computed from.
//
// The folder is an xpuinject output (package outdir): assembled aside, renamed into
// place when complete, an earlier pack replaced only when it is one, and never the
// source checkpoint or a folder holding it. An interrupted run leaves the earlier pack as
// it was and at most a temporary sibling that the next run removes.

// DefaultMaxShardSize is transformers' save_pretrained default, "5GB" (10^9 bytes).
const DefaultMaxShardSize = 5_000_000_000

// File names of a packed checkpoint.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Metadata keys written into every shard's __metadata__ (besides "format": "pt").
const (
	MetaTool          = "xpuinject_tool"
	MetaSource        = "xpuinject_source"         // "hf://org/name@revision" or the local folder
	MetaSourceSHA256  = "xpuinject_source_sha256"  // JSON object: safetensors file (relative) -> sha256
	MetaTransforms    = "xpuinject_transforms"     // comma-separated, sorted, distinct
	MetaPlanSHA256    = "xpuinject_plan_sha256"    // sha256 of plan.yaml as written
	MetaSchemaVersion = "xpuinject_schema_version" // plan schema version
)

// ErrWrite marks a failure while writing the packed checkpoint (output folder, disk).
var ErrWrite = errors.New("inject: pack")

// Options tune Write.
type Options struct {
	// MaxShardSize is the largest number of tensor bytes in one shard (a single larger
	// tensor gets a shard of its own); 0 means DefaultMaxShardSize.
	MaxShardSize int64
	// Tool is recorded in __metadata__, e.g. "xpuinject 0.1.0".
	Tool string
	// Workers is the number of goroutines computing row blocks; 0 means GOMAXPROCS.
	Workers int
	// Progress, when set, is called after each tensor is written.
	Progress func(Progress)

	// NoReplace refuses to replace an earlier pack in the output folder (by default
	// pack recomputes its own earlier output; anything else is always refused).
	NoReplace bool
	// Inputs are files the run reads besides the checkpoint (a plan file): the output
	// may not be, hold or sit inside one. The checkpoint folder and files always count.
	Inputs []outdir.Input

	// create opens an output file for writing (tests substitute failing files).
	create func(path string) (packFile, error)
}

// Progress reports one written tensor.
type Progress struct {
	Index, Total int    // 1-based index of the tensor just written, of Total
	Name         string // its name
	Bytes        int64  // output bytes written so far (tensor data)
	TotalBytes   int64  // output bytes in all
}

// Result says what Write wrote.
type Result struct {
	Dir         string
	Files       []string // file names in Dir: shards, then the index (if sharded), then plan.yaml
	Tensors     int
	OutputBytes int64 // tensor bytes written
	InputBytes  int64 // source tensor bytes read (each source counted once per output that reads it)
	PlanSHA256  string
	Metadata    map[string]string // the __metadata__ of every shard
}

// packFile is where a shard's bytes go.
type packFile interface {
	io.WriterAt
	Sync() error
	Close() error
}

func createFile(path string) (packFile, error) { return outdir.Create(path) }

// packInputs are what a pack reads: the checkpoint folder and each of its files (in an
// HF snapshot these are links into blobs/, which count too), plus the caller's.
func packInputs(ck *models.Checkpoint, extra []outdir.Input) []outdir.Input {
	in := []outdir.Input{{Path: ck.Dir, What: "the source checkpoint"}}
	for _, f := range ck.Files {
		in = append(in, outdir.Input{Path: f, What: "a source checkpoint file"})
	}
	return append(in, extra...)
}

// packBlockBytes bounds the source bytes one worker reads per row block (at least one row).
// 1 MiB: large enough that pread/pwrite call overhead is noise, small enough that the
// per-worker scratch (source block + float64 block + output block, ≤ 3.5 MiB) is a
// small constant next to the output tensors.
var packBlockBytes int64 = 1 << 20 // a var so tests can force many small blocks

// Write computes every output tensor of plan from ck and writes the packed checkpoint
// and plan.yaml into outDir (created if missing). Memory stays near one output tensor:
// sources are read by row blocks (pread, so page cache does not count as ours), row-major
// outputs are written block by block, K-major outputs are assembled in one reused buffer.
func Write(ctx context.Context, ck *models.Checkpoint, pl *plan.Plan, outDir string, opts Options) (*Result, error) {
	if ck == nil || pl == nil {
		return nil, fmt.Errorf("%w: no checkpoint or plan", ErrWrite)
	}
	if opts.MaxShardSize < 0 {
		return nil, fmt.Errorf("%w: max shard size %d is negative", ErrWrite, opts.MaxShardSize)
	}
	if opts.MaxShardSize == 0 {
		opts.MaxShardSize = DefaultMaxShardSize
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.create == nil {
		opts.create = createFile
	}
	recipes, err := planRecipes(ck, pl)
	if err != nil {
		return nil, err
	}
	planYAML, err := plan.MarshalYAML(pl)
	if err != nil {
		return nil, err
	}
	planSum := sha256.Sum256(planYAML)
	// The source files are hashed while the tensors are computed: the shards' headers are
	// written first with a same-length placeholder for the digests and rewritten once the
	// digests are known (hex digests have a fixed length, so the header length and every
	// tensor offset stay put). Hashing a 2.5 GB checkpoint costs ~1.5 CPU-seconds; doing
	// it up front would add that to the wall time.
	hashCtx, stopHash := context.WithCancel(ctx)
	defer stopHash()
	hashes := startSourceSHA256(hashCtx, ck, opts.Workers)
	meta, err := packMetadata(ck, pl, recipes, opts, hex.EncodeToString(planSum[:]), hashes.placeholder)
	if err != nil {
		return nil, err
	}
	shards := assignShards(recipes, opts.MaxShardSize)

	px := &packer{ctx: ctx, ck: ck, opts: opts, files: map[string]*os.File{},
		finalMeta: func() (map[string]string, error) {
			sums, err := hashes.wait()
			if err != nil {
				return nil, err
			}
			return packMetadata(ck, pl, recipes, opts, hex.EncodeToString(planSum[:]), sums)
		}}
	defer px.close()
	for _, r := range recipes { // every source file open and every extent checked before writing
		if err := px.open(r); err != nil {
			return nil, err
		}
	}
	tx, err := outdir.Begin(outDir, outdir.Options{Kind: outdir.KindPacked, Tool: opts.Tool,
		Replace: !opts.NoReplace, Inputs: packInputs(ck, opts.Inputs)})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	defer tx.Abort() // nothing once committed

	px.kbuf = make([]byte, 0, maxKMajor(recipes))
	res := &Result{Dir: outDir, Tensors: len(recipes), PlanSHA256: hex.EncodeToString(planSum[:])}
	for _, r := range recipes {
		px.totalBytes += r.outBytes()
	}
	px.total = len(recipes)

	weightMap := map[string]string{}
	for i, sh := range shards {
		name := SingleFile
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		if err := px.writeShard(tx.Path(name), sh, meta); err != nil {
			return nil, err
		}
		for _, r := range sh {
			weightMap[r.Out.Name] = name
		}
		res.Files = append(res.Files, name)
	}
	if len(shards) > 1 {
		idx, err := indexJSON(weightMap, px.totalBytes)
		if err != nil {
			return nil, err
		}
		if err := tx.WriteFile(IndexFile, idx); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrWrite, err)
		}
		res.Files = append(res.Files, IndexFile)
	}
	if err := tx.WriteFile(plan.FileName, planYAML); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	res.Files = append(res.Files, plan.FileName)
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	if res.Metadata, err = px.finalMeta(); err != nil {
		return nil, err
	}
	res.OutputBytes = px.totalBytes
	res.InputBytes = px.inputBytes.Load()
	return res, nil
}

// planRecipes checks every output of plan and returns their recipes sorted by name.
func planRecipes(ck *models.Checkpoint, pl *plan.Plan) ([]*recipe, error) {
	src := func(name string) (srcInfo, bool) {
		t, ok := ck.Tensors[name]
		if !ok {
			return srcInfo{}, false
		}
		return srcInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}, true
	}
	seen := map[string]string{}
	var out []*recipe
	for i := range pl.Layers {
		lp := &pl.Layers[i]
		for _, o := range lp.Outputs {
			if prev, dup := seen[o.Name]; dup {
				return nil, fmt.Errorf("%w: output tensor %q is planned by both %s and %s", ErrTransform, o.Name, prev, lp.Module)
			}
			if o.Name == "" || o.Name == "__metadata__" {
				return nil, fmt.Errorf("%w: layer %s: output tensor name %q is empty or reserved", ErrTransform, lp.Module, o.Name)
			}
			seen[o.Name] = lp.Module
			r, err := newRecipe(lp, o, src)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the plan has no output tensors (every layer kept?): nothing to pack", ErrTransform)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Out.Name < out[j].Out.Name })
	return out, nil
}

// assignShards splits the name-sorted recipes into shards the way huggingface_hub's
// split_state_dict_into_shards_factory does: a tensor larger than the limit gets a shard
// of its own; otherwise a new shard starts when the next tensor would exceed the limit.
func assignShards(rs []*recipe, max int64) [][]*recipe {
	var shards [][]*recipe
	var cur []*recipe
	var size int64
	for _, r := range rs {
		n := r.outBytes()
		if n > max {
			shards = append(shards, []*recipe{r})
			continue
		}
		if size+n > max && len(cur) > 0 {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, r)
		size += n
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	// huggingface_hub appends the oversized tensors' shards in iteration order; keep the
	// shard order by first tensor name so file numbering follows the names.
	sort.SliceStable(shards, func(i, j int) bool { return shards[i][0].Out.Name < shards[j][0].Out.Name })
	return shards
}

func maxKMajor(rs []*recipe) int64 {
	var m int64
	for _, r := range rs {
		if r.KMajor && r.outBytes() > m {
			m = r.outBytes()
		}
		m = max(m, maxKMajor(r.Subs))
	}
	return m
}

// dtypeRank orders dtypes as the safetensors reference writer lays data out: by
// descending dtype (its Dtype enum order; safetensors/src/tensor.rs, prepare), then
// name, so files match what safetensors.torch.save_file writes for the same tensors.
var dtypeRank = map[models.DType]int{
	models.BOOL: 0, models.U8: 1, models.I8: 2, models.F8E5M2: 3, models.F8E4M3: 4,
	models.I16: 5, models.U16: 6, models.F16: 7, models.BF16: 8, models.I32: 9, models.U32: 10,
	models.F32: 11, models.F64: 12, models.I64: 13, models.U64: 14,
}

// packMetadata builds the __metadata__ every shard carries.
func packMetadata(ck *models.Checkpoint, pl *plan.Plan, rs []*recipe, opts Options, planSHA string, sums map[string]string) (map[string]string, error) {
	sj, err := json.Marshal(sums) // map keys sorted
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	source := pl.Source.Path
	if pl.Source.Repo != "" {
		source = "hf://" + pl.Source.Repo
		if pl.Source.Revision != "" {
			source += "@" + pl.Source.Revision
		}
	}
	if source == "" {
		source = ck.Dir
	}
	ts := map[string]bool{}
	for _, r := range rs {
		for _, t := range r.Out.Transforms {
			ts[t] = true
		}
	}
	names := make([]string, 0, len(ts))
	for t := range ts {
		names = append(names, t)
	}
	sort.Strings(names)
	return map[string]string{
		"format":          "pt",
		MetaTool:          opts.Tool,
		MetaSource:        source,
		MetaSourceSHA256:  string(sj),
		MetaTransforms:    strings.Join(names, ","),
		MetaPlanSHA256:    planSHA,
		MetaSchemaVersion: strconv.Itoa(pl.Schema),
	}, nil
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// sourceHashes is the sha256 of each safetensors file of a checkpoint, keyed by its
// path relative to the checkpoint folder, computed in the background.
type sourceHashes struct {
	placeholder map[string]string // same keys, 64 zeros each
	done        chan struct{}
	sums        map[string]string
	err         error
}

func (h *sourceHashes) wait() (map[string]string, error) {
	<-h.done
	return h.sums, h.err
}

// startSourceSHA256 starts hashing ck's files. A file that is a symlink into an HF cache
// blob named by its sha256 (how LFS files are stored, and checked on download) is not
// read again.
func startSourceSHA256(ctx context.Context, ck *models.Checkpoint, workers int) *sourceHashes {
	h := &sourceHashes{placeholder: map[string]string{}, done: make(chan struct{}), sums: map[string]string{}}
	type job struct{ path, rel string }
	var jobs []job
	for _, f := range ck.Files {
		rel, err := filepath.Rel(ck.Dir, f)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = f
		}
		h.placeholder[rel] = strings.Repeat("0", sha256.Size*2)
		if target, err := os.Readlink(f); err == nil && hexSHA256.MatchString(filepath.Base(target)) {
			h.sums[rel] = filepath.Base(target)
			continue
		}
		jobs = append(jobs, job{f, rel})
	}
	go func() {
		defer close(h.done)
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, max(1, workers))
		for _, j := range jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func(j job) {
				defer wg.Done()
				defer func() { <-sem }()
				sum, err := fileSHA256(ctx, j.path)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && h.err == nil {
					h.err = fmt.Errorf("%w: hash source file %s: %w", ErrWrite, j.path, err)
				}
				h.sums[j.rel] = sum
			}(j)
		}
		wg.Wait()
	}()
	return h
}

// ctxReader stops a long read when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func fileSHA256(ctx context.Context, path string) (string, error) {
	f, _, err := models.OpenRegular(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, ctxReader{ctx, f}, make([]byte, 1<<20)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// indexJSON is model.safetensors.index.json as transformers writes it
// (json.dumps(index, indent=2, sort_keys=True) + "\n").
func indexJSON(weightMap map[string]string, total int64) ([]byte, error) {
	idx := map[string]any{
		"metadata":   map[string]any{"total_size": total},
		"weight_map": weightMap,
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: index: %w", ErrWrite, err)
	}
	return append(b, '\n'), nil
}

// ParseSize reads a shard size: plain bytes ("1000000"), or a number with a unit, decimal
// (KB, MB, GB, TB = 10^3...) or binary (KiB, MiB, GiB, TiB = 2^10...), case-insensitive,
// as transformers' max_shard_size does ("5GB", "500MB", "2GiB").
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	m := regexp.MustCompile(`(?i)^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b|b)?$`).FindStringSubmatch(t)
	if m == nil {
		return 0, fmt.Errorf("inject: size %q: want bytes or a number with KB, MB, GB, TB, KiB, MiB, GiB, TiB", s)
	}
	unit := strings.ToUpper(m[2])
	mult := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[unit]
	if unit == "" || unit == "B" {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("inject: size %q: %w", s, err)
		}
		if n <= 0 {
			return 0, fmt.Errorf("inject: size %q must be positive", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("inject: size %q: %w", s, err)
	}
	v := f * mult
	if v < 1 || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("inject: size %q is out of range", s)
	}
	return int64(v), nil
}

// ---- the streaming executor ----

type packer struct {
	ctx        context.Context
	ck         *models.Checkpoint
	opts       Options
	files      map[string]*os.File
	kbuf       []byte // K-major assembly buffer, capacity = the largest K-major output
	scratch    []*scratch
	total      int
	done       int
	written    int64
	totalBytes int64
	inputBytes atomic.Int64
	finalMeta  func() (map[string]string, error) // the metadata with the real digests
}

// scratch is one worker's reusable buffers.
type scratch struct {
	raw []byte
	out []byte
	f64 []float64
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (p *packer) close() {
	for _, f := range p.files {
		f.Close()
	}
}

// readAt reads len(buf) bytes of tensor name's data at byte offset off.
func (p *packer) readAt(name string, buf []byte, off int64) error {
	t := p.ck.Tensors[name]
	if off < 0 || off+int64(len(buf)) > t.Size {
		return fmt.Errorf("%w: tensor %q: read [%d, %d) past its %d bytes", ErrWrite, name, off, off+int64(len(buf)), t.Size)
	}
	f := p.files[t.File]
	if f == nil {
		return fmt.Errorf("%w: tensor %q: file %s not opened", ErrWrite, name, t.File)
	}
	if _, err := f.ReadAt(buf, t.Offset+off); err != nil {
		return fmt.Errorf("%w: read tensor %q from %s: %w", ErrWrite, name, t.File, err)
	}
	p.inputBytes.Add(int64(len(buf)))
	return nil
}

// open opens the files holding the recipe's sources and checks their extents.
func (p *packer) open(r *recipe) error {
	for _, n := range r.Out.Sources {
		t := p.ck.Tensors[n]
		if p.files[t.File] != nil {
			continue
		}
		f, _, err := models.OpenRegular(t.File)
		if err != nil {
			return fmt.Errorf("%w: tensor %q: %w", ErrWrite, n, err)
		}
		p.files[t.File] = f
	}
	for _, n := range r.Out.Sources {
		t := p.ck.Tensors[n]
		st, err := p.files[t.File].Stat()
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrWrite, t.File, err)
		}
		if want := t.Elems() * int64(t.DType.Size()); t.Size != want || t.Offset < 0 || t.Offset+t.Size > st.Size() {
			return fmt.Errorf("%w: tensor %q: data [%d, %d) of %s (%d bytes, %d expected) is outside the file (%d bytes)",
				ErrWrite, n, t.Offset, t.Offset+t.Size, t.File, t.Size, want, st.Size())
		}
	}
	return nil
}

// readVec reads a whole 1-D source as float64.
func (p *packer) readVec(name string) ([]float64, error) {
	t := p.ck.Tensors[name]
	buf := make([]byte, t.Size)
	if err := p.readAt(name, buf, 0); err != nil {
		return nil, err
	}
	v := make([]float64, t.Elems())
	if err := DecodeF64(v, buf, t.DType); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return v, nil
}

func (p *packer) writeShard(path string, rs []*recipe, meta map[string]string) error {
	order := append([]*recipe(nil), rs...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i].OutDT, order[j].OutDT
		if a != b {
			return dtypeRank[a] > dtypeRank[b]
		}
		return order[i].Out.Name < order[j].Out.Name
	})
	ts := make([]*models.Tensor, len(order))
	for i, r := range order {
		ts[i] = &models.Tensor{Name: r.Out.Name, DType: r.OutDT, Shape: r.Out.Shape}
	}
	var hdr bytes.Buffer
	if _, err := models.WriteHeader(&hdr, ts, meta); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWrite, path, err)
	}
	f, err := p.opts.create(path)
	if err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrWrite, path, err)
	}
	fail := func(err error) error {
		f.Close()
		return err
	}
	if _, err := f.WriteAt(hdr.Bytes(), 0); err != nil {
		return fail(fmt.Errorf("%w: write the header of %s: %w", ErrWrite, path, err))
	}
	for i, r := range order {
		if err := p.ctx.Err(); err != nil {
			return fail(fmt.Errorf("%w: interrupted before tensor %q: %w", ErrWrite, r.Out.Name, err))
		}
		if err := p.writeTensor(r, f, ts[i].Offset); err != nil {
			return fail(err)
		}
		startWriteback(f, ts[i].Offset, ts[i].Size)
		p.done++
		p.written += r.outBytes()
		if p.opts.Progress != nil {
			p.opts.Progress(Progress{Index: p.done, Total: p.total, Name: r.Out.Name, Bytes: p.written, TotalBytes: p.totalBytes})
		}
	}
	final, err := p.finalMeta()
	if err != nil {
		return fail(err)
	}
	var hdr2 bytes.Buffer
	if _, err := models.WriteHeader(&hdr2, ts, final); err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrWrite, path, err))
	}
	if hdr2.Len() != hdr.Len() {
		return fail(fmt.Errorf("%w: %s: header with the source digests is %d bytes, the placeholder was %d",
			ErrWrite, path, hdr2.Len(), hdr.Len()))
	}
	if _, err := f.WriteAt(hdr2.Bytes(), 0); err != nil {
		return fail(fmt.Errorf("%w: write the header of %s: %w", ErrWrite, path, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("%w: sync %s: %w", ErrWrite, path, err))
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %w", ErrWrite, path, err)
	}
	return nil
}

// writeAt writes b at off, naming the tensor on failure (disk full shows up here).
func writeAt(f packFile, b []byte, off int64, name string) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("%w: write tensor %q: %w", ErrWrite, name, err)
	}
	return nil
}

// writeTensor computes r and writes its bytes at off in f.
func (p *packer) writeTensor(r *recipe, f packFile, off int64) error {
	if r.outBytes() == 0 {
		return nil
	}
	switch r.Op {
	case opStack:
		// One expert's slice at a time: memory stays one slice, not the stacked tensor.
		for _, s := range r.Subs {
			if err := p.writeTensor(s, f, off); err != nil {
				return err
			}
			off += s.outBytes()
		}
		return nil
	case opFoldBias, opFoldInBias:
		return p.writeBias(r, f, off)
	case opAddOne:
		w, err := p.readVec(r.Parts[0])
		if err != nil {
			return err
		}
		buf := make([]byte, r.outBytes())
		if err := EncodeF64(buf, AddOne(w), models.F32); err != nil {
			return r.wrap(err)
		}
		return writeAt(f, buf, off, r.Out.Name)
	}
	var rowScale, colScale []float64
	if r.Op == opFoldRows || r.Op == opFoldCols {
		gamma, err := p.readVec(r.BN[0])
		if err != nil {
			return err
		}
		variance, err := p.readVec(r.BN[3])
		if err != nil {
			return err
		}
		s, err := BNScale(gamma, variance, r.Eps, r.BN[3])
		if err != nil {
			return r.wrap(err)
		}
		if r.Op == opFoldRows {
			rowScale = s
		} else {
			colScale = s
		}
	}
	outES := int64(r.OutDT.Size())
	var kout []byte
	if r.KMajor {
		kout = p.kbuf[:r.outBytes()]
	}
	// Part boundaries: global row ranges of each source.
	type part struct {
		name       string
		dt         models.DType
		start, end int64
	}
	var parts []part
	var at int64
	for _, n := range r.Parts {
		t := p.ck.Tensors[n]
		rows := r.Rows
		if len(r.Parts) > 1 {
			rows = t.Shape[0]
		}
		parts = append(parts, part{n, t.DType, at, at + rows})
		at += rows
	}
	maxES := int64(1)
	for _, pt := range parts {
		maxES = max(maxES, int64(pt.dt.Size()))
	}
	rowsPer := max(int64(1), packBlockBytes/(r.Cols*maxES))
	nblocks := (r.Rows + rowsPer - 1) / rowsPer
	workers := min(int64(p.opts.Workers), nblocks)
	for len(p.scratch) < int(workers) {
		p.scratch = append(p.scratch, &scratch{})
	}
	var next atomic.Int64
	var failed atomic.Bool
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := int64(0); w < workers; w++ {
		wg.Add(1)
		go func(w int64) {
			defer wg.Done()
			sc := p.scratch[w]
			for !failed.Load() {
				b := next.Add(1) - 1
				if b >= nblocks {
					return
				}
				if b%64 == 0 {
					if err := p.ctx.Err(); err != nil {
						errs[w] = fmt.Errorf("%w: interrupted in tensor %q: %w", ErrWrite, r.Out.Name, err)
						failed.Store(true)
						return
					}
				}
				r0 := b * rowsPer
				r1 := min(r0+rowsPer, r.Rows)
				n := int((r1 - r0) * r.Cols)
				sc.out = grow(sc.out, n*int(outES))
				// rows reads source rows [s0, s0+n) into output rows from at (relative to
				// r0): each part overlapping them is read and converted into its slot of sc.out.
				rows := func(at, s0, n int64) error {
					for _, pt := range parts {
						a, e := max(s0, pt.start), min(s0+n, pt.end)
						if a >= e {
							continue
						}
						es := int64(pt.dt.Size())
						m := int((e - a) * r.Cols)
						d0 := at + a - s0
						dst := sc.out[d0*r.Cols*outES : (d0+e-a)*r.Cols*outES]
						srcOff := (a - pt.start) * r.Cols * es
						if r.Raw {
							if err := p.readAt(pt.name, dst, srcOff); err != nil {
								return err
							}
							continue
						}
						sc.raw = grow(sc.raw, m*int(es))
						if err := p.readAt(pt.name, sc.raw, srcOff); err != nil {
							return err
						}
						if r.Op == opCopy {
							if err := castTo(r.OutDT, dst, sc.raw, pt.dt, m); err != nil {
								return r.wrap(err)
							}
							continue
						}
						sc.f64 = grow(sc.f64, m)
						if err := DecodeF64(sc.f64, sc.raw, pt.dt); err != nil {
							return r.wrap(err)
						}
						if rowScale != nil {
							ScaleRows(sc.f64, int(r.Cols), int(a), rowScale)
						} else {
							ScaleCols(sc.f64, colScale)
						}
						if err := EncodeF64(dst, sc.f64, r.OutDT); err != nil {
							return r.wrap(err)
						}
					}
					return nil
				}
				if err := func() error {
					if r.Perm == nil {
						if err := rows(0, r0, r1-r0); err != nil {
							return err
						}
					} else {
						for o := r0; o < r1; o++ {
							if err := rows(o-r0, r.Perm[o], 1); err != nil {
								return err
							}
						}
					}
					if r.KMajor {
						TransposeInto(kout, sc.out, int(outES), int(r1-r0), int(r.Cols), int(r.Rows), int(r0))
						return nil
					}
					return writeAt(f, sc.out, off+r0*r.Cols*outES, r.Out.Name)
				}(); err != nil {
					errs[w] = err
					failed.Store(true)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if r.KMajor {
		return p.writeParallel(f, kout, off, r.Out.Name)
	}
	return nil
}

// writeParallel writes b at off in 8 MiB chunks spread over the workers: one pwrite of a
// 100+ MiB K-major tensor is a single-threaded copy into the page cache that would
// otherwise leave the other cores idle.
func (p *packer) writeParallel(f packFile, b []byte, off int64, name string) error {
	const chunk = 8 << 20
	nchunks := (len(b) + chunk - 1) / chunk
	workers := min(p.opts.Workers, nchunks)
	if workers <= 1 {
		return writeAt(f, b, off, name)
	}
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				c := int(next.Add(1) - 1)
				if c >= nchunks {
					return
				}
				lo, hi := c*chunk, min((c+1)*chunk, len(b))
				if err := writeAt(f, b[lo:hi], off+int64(lo), name); err != nil {
					errs[w] = err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeBias computes a folded bias (small: one value per output channel).
func (p *packer) writeBias(r *recipe, f packFile, off int64) error {
	var vecs [4][]float64
	for k, n := range r.BN {
		v, err := p.readVec(n)
		if err != nil {
			return err
		}
		vecs[k] = v
	}
	var b []float64
	if r.Bias != "" {
		v, err := p.readVec(r.Bias)
		if err != nil {
			return err
		}
		b = v
	}
	s, err := BNScale(vecs[0], vecs[3], r.Eps, r.BN[3])
	if err != nil {
		return r.wrap(err)
	}
	var out []float64
	if r.Op == opFoldBias {
		out = FoldBias(b, s, vecs[1], vecs[2])
	} else {
		out = make([]float64, r.Rows)
		copy(out, b)
		shift := BNInputShift(s, vecs[1], vecs[2])
		w := p.ck.Tensors[r.W]
		cols := w.Shape[1]
		es := int64(w.DType.Size())
		rowsPer := max(int64(1), packBlockBytes/(cols*es))
		raw := make([]byte, 0, rowsPer*cols*es)
		f64 := make([]float64, 0, rowsPer*cols)
		for r0 := int64(0); r0 < w.Shape[0]; r0 += rowsPer {
			r1 := min(r0+rowsPer, w.Shape[0])
			raw = raw[:(r1-r0)*cols*es]
			if err := p.readAt(r.W, raw, r0*cols*es); err != nil {
				return err
			}
			f64 = f64[:(r1-r0)*cols]
			if err := DecodeF64(f64, raw, w.DType); err != nil {
				return r.wrap(err)
			}
			AddRowDots(out, f64, int(r0), shift)
		}
	}
	buf := make([]byte, r.outBytes())
	if err := EncodeF64(buf, out, r.OutDT); err != nil {
		return r.wrap(err)
	}
	return writeAt(f, buf, off, r.Out.Name)
}

// wrap names the recipe's tensor and layer on an error from a pure transform.
func (r *recipe) wrap(err error) error {
	return fmt.Errorf("tensor %q (layer %s): %w", r.Out.Name, r.Layer, err)
}
