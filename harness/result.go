package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/xpuinject/xpuinject/models"
)

// Num is a float that reads JSON null (the driver's NaN/Inf) as NaN.
type Num float64

func (n *Num) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Num(f)
	return nil
}

func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// Metrics are the error metrics of one model against the fp32 oracle; the
// logits-level ones add top-1 agreement, KL and perplexity.
type Metrics struct {
	Cosine     Num  `json:"cosine"`
	MaxAbs     Num  `json:"max_abs"`
	MeanAbs    Num  `json:"mean_abs"`
	MaxRel     Num  `json:"max_rel"`
	MeanRel    Num  `json:"mean_rel"`
	RelFloor   Num  `json:"rel_floor"`
	Nonfinite  int  `json:"nonfinite"`
	Top1       *Num `json:"top1_agreement,omitempty"`
	KL         *Num `json:"kl,omitempty"`
	Perplexity *Num `json:"perplexity,omitempty"`
}

// Agreement of two models' greedy generations over the prompts (fractions are means over them).
type Agreement struct {
	Prefix      Num          `json:"prefix"`    // fraction of tokens before the first divergence
	Positions   Num          `json:"positions"` // fraction of positions equal
	Tokens      int          `json:"tokens"`
	Divergences []Divergence `json:"divergences,omitempty"`
	Ties        int          `json:"ties"`
	NonTies     int          `json:"non_ties"`
}

// RuntimeAgreement compares one model's greedy tokens under the graph runtime with its own eager
// tokens and with the oracle's.
type RuntimeAgreement struct {
	VsEager  Agreement `json:"vs_eager"`
	VsOracle Agreement `json:"vs_oracle"`
}

// Divergence is the first position where two greedy runs from one prompt differ.
type Divergence struct {
	Prompt           int            `json:"prompt"`
	Position         int            `json:"position"`
	Tokens           []int          `json:"tokens"`
	OracleTop2Margin Num            `json:"oracle_top2_margin"`
	OraclePickMargin Num            `json:"oracle_pick_margin"`
	ModelMargins     map[string]Num `json:"model_margins,omitempty"`
	Tie              bool           `json:"tie"`
}

// Compared is one metric of the injected model beside stock's (accuracy.compare).
type Compared struct {
	Injected Num  `json:"injected"`
	Stock    Num  `json:"stock"`
	Ratio    *Num `json:"ratio"`
}

// Latency paths, in report order: how a model ran when it was timed.
const (
	PathStockEager    = "stock_eager"    // stock transformers, eager
	PathStockCompiled = "stock_compiled" // stock on a StaticCache under torch.compile(mode="reduce-overhead")
	PathStockGraph    = "stock_graph"    // stock under the package's graph runtime
	PathInjectedGraph = "injected_graph" // injected under the graph runtime: the default path
	// PathInjectedCompiled is injected on a StaticCache under torch.compile(mode="reduce-overhead").
	PathInjectedCompiled = "injected_compiled"
	PathInjectedEager    = "injected_eager" // injected, eager
	// PathStockBest is a mixture-of-experts model's stock on its fastest experts implementation,
	// eager or compiled: the anchor there.
	PathStockBest = "stock_best"
)

// LatencyPaths lists every path in report order.
var LatencyPaths = []string{PathStockEager, PathStockCompiled, PathStockBest, PathStockGraph, PathInjectedGraph,
	PathInjectedCompiled, PathInjectedEager}

// LatencyRatios are the compared pairs (numerator, denominator); the first measured one is the
// headline: the default path (what generate and the card use) against the anchor, stock best
// where the model has experts, else stock compiled.
var LatencyRatios = [][2]string{
	{PathInjectedGraph, PathStockBest},
	{PathInjectedCompiled, PathStockBest},
	{PathInjectedGraph, PathStockCompiled},
	{PathInjectedCompiled, PathStockCompiled},
	{PathInjectedGraph, PathStockGraph},
	{PathInjectedEager, PathStockEager},
}

// LatencyRow is one measured point: median ms per path (null: the path failed, see
// Latency.Errors), the one-time setup before its first timed call (compile or capture seconds),
// and the ratios by "numerator/denominator" path names.
type LatencyRow struct {
	Tokens   int            `json:"tokens,omitempty"`
	Batch    int            `json:"batch"`
	Context  int            `json:"context,omitempty"`
	CacheLen int            `json:"cache_len,omitempty"`
	MS       map[string]Num `json:"ms"`
	SetupS   map[string]Num `json:"setup_s,omitempty"`
	Ratios   map[string]Num `json:"ratios,omitempty"`
	// StockExperts is a mixture-of-experts model's stock timed on each experts implementation
	// (absent for a dense model); ExpertsImplementation names each stock path's fastest, Anchor
	// the fastest of all (the figure of PathStockBest).
	StockExperts          []ExpertsSetting  `json:"stock_experts,omitempty"`
	ExpertsImplementation map[string]string `json:"experts_implementation,omitempty"`
	Anchor                *Anchor           `json:"anchor,omitempty"`
}

// ExpertsSetting is one stock path timed on one experts implementation: its ms, or null and
// why it could not run.
type ExpertsSetting struct {
	Path                  string `json:"path"`
	ExpertsImplementation string `json:"experts_implementation"`
	MS                    Num    `json:"ms"`
	SetupS                *Num   `json:"setup_s,omitempty"`
	Error                 string `json:"error,omitempty"`
}

// Anchor names the stock path and experts implementation that ran a point fastest.
type Anchor struct {
	Path                  string `json:"path"`
	ExpertsImplementation string `json:"experts_implementation"`
}

// Roofline is a mixture-of-experts model's active-bytes roofline at batch 1: the weight bytes
// one decode step reads (Bytes by part, in RooflineParts order) over the bandwidth.
type Roofline struct {
	Batch        int              `json:"batch"`
	Dtype        string           `json:"dtype"`
	TopK         int              `json:"top_k"`
	BandwidthBps Num              `json:"bandwidth_Bps"`
	Bytes        map[string]int64 `json:"bytes"`
	TotalBytes   int64            `json:"total_bytes"`
	ExpertsBytes int64            `json:"experts_bytes"` // every expert's, for comparison
	MS           Num              `json:"ms"`
	Method       string           `json:"method"`
}

// RooflineParts are Roofline.Bytes' keys in report order, with their labels.
var RooflineParts = [][2]string{
	{"attention", "attention"}, {"norms", "norms"}, {"router", "routers"},
	{"experts_active", "top-k experts"}, {"dense_mlp", "dense MLP layers"},
	{"embedding_row", "embedding row"}, {"lm_head", "lm_head"}, {"other", "other"},
}

// Value returns the row's ms for path and whether it was measured (present and a number).
func (r LatencyRow) Value(path string) (float64, bool) {
	v, ok := r.MS[path]
	if !ok || math.IsNaN(float64(v)) {
		return math.NaN(), false
	}
	return float64(v), true
}

// Headline is the row's first LatencyRatios pair with both paths measured, and its ratio.
func (r LatencyRow) Headline() (pair [2]string, ratio float64, ok bool) {
	for _, rp := range LatencyRatios {
		a, okA := r.Value(rp[0])
		d, okD := r.Value(rp[1])
		if okA && okD && d > 0 {
			return rp, a / d, true
		}
	}
	return [2]string{}, math.NaN(), false
}

// Schema is the eval.json schema the driver writes. This build also reads schema 2 (one device,
// no placement), which schema 3 extends with device.count and device.placement.
const Schema = 3

// Stage is one process's part of a bf16 model: one pipeline stage, or the whole model.
type Stage struct {
	Rank       int    `json:"rank"`
	Host       string `json:"host"`
	Device     string `json:"device"`
	Layers     []int  `json:"layers"` // decoder layers [start, end); empty: none
	Embeddings bool   `json:"embeddings"`
	Norm       bool   `json:"norm"` // the final norm
	Head       bool   `json:"head"`
	Bytes      int64  `json:"bytes"` // parameters and buffers the process holds
}

// ModelPlacement is how a bf16 model was placed: "single" (one device) or "pipeline".
type ModelPlacement struct {
	Mode   string  `json:"mode"`
	Stages []Stage `json:"stages"`
}

// OraclePlacement is where the fp32 oracle ran: "layered" (units read from the checkpoint as the
// forward reaches them, kept while they fit BudgetBytes) or "whole" (loaded at once).
type OraclePlacement struct {
	Mode          string `json:"mode"`
	Rank          int    `json:"rank"`
	Host          string `json:"host,omitempty"`
	Device        string `json:"device"`
	Bytes         int64  `json:"bytes,omitempty"` // whole
	Units         int    `json:"units,omitempty"`
	KeptUnits     int    `json:"kept_units,omitempty"`
	KeptBytes     int64  `json:"kept_bytes,omitempty"`
	BudgetBytes   int64  `json:"budget_bytes,omitempty"`
	Loads         int    `json:"loads,omitempty"`
	StreamedLoads int    `json:"streamed_loads,omitempty"`
	// the streamed units' checkpoint tensors held in host memory between passes
	HostBudgetBytes int64 `json:"host_budget_bytes,omitempty"`
	HostBytes       int64 `json:"host_bytes,omitempty"`
	HostLoads       int   `json:"host_loads,omitempty"`
}

// Placement says which devices ran which model.
type Placement struct {
	Oracle   *OraclePlacement `json:"oracle,omitempty"`
	Stock    *ModelPlacement  `json:"stock,omitempty"`
	Injected *ModelPlacement  `json:"injected,omitempty"`
}

// Result is eval.json, written by the driver (docs/eval.md documents the schema).
type Result struct {
	Schema int `json:"schema"`
	Model  struct {
		Path  string `json:"path"`
		Arch  string `json:"arch"`
		Class string `json:"class"`
		// Dtype is what the stock and injected models ran in: the plan's (bf16 when absent).
		Dtype string `json:"dtype"`
		// VocabSize is the model's vocabulary (text models; 0 when absent).
		VocabSize int `json:"vocab_size,omitempty"`
	} `json:"model"`
	Device struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Interpret bool   `json:"interpret"`
		// Count is the devices the bf16 models were spread over, one process each (1 in a
		// schema 2 file).
		Count     int        `json:"count"`
		Placement *Placement `json:"placement,omitempty"`
	} `json:"device"`
	Versions  map[string]string `json:"versions"`
	Injection struct {
		Path            string         `json:"path"`
		Backend         string         `json:"backend"`
		Replaced        map[string]int `json:"replaced"`
		ReplacedModules []string       `json:"replaced_modules"`
		Kept            []struct {
			Module string `json:"module"`
			Reason string `json:"reason"`
		} `json:"kept"`
		PackedTensors int   `json:"packed_tensors"`
		PackedBytes   int64 `json:"packed_bytes"`
		// PackedKeptTensors are kept modules' tensors in the packed checkpoint, which
		// injection does not load (absent from older files: 0).
		PackedKeptTensors int `json:"packed_kept_tensors"`
		// PlanGPU is the GPU whose measured vendor routes the plan took (plan.yaml `gpu`;
		// absent from older files).
		PlanGPU string `json:"plan_gpu,omitempty"`
	} `json:"injection"`
	Accuracy struct {
		Input            map[string]any `json:"input"`
		OraclePerplexity *Num           `json:"oracle_perplexity,omitempty"`
		Injected         Metrics        `json:"injected"`
		Stock            Metrics        `json:"stock"`
		// Compare is, per metric, injected, stock and injected / stock.
		Compare map[string]Compared `json:"compare,omitempty"`
	} `json:"accuracy"`
	Layers []struct {
		Name     string  `json:"name"`
		Injected Metrics `json:"injected"`
		Stock    Metrics `json:"stock"`
	} `json:"layers"`
	Generation *struct {
		Prompts         int       `json:"prompts"`
		TieBound        Num       `json:"tie_bound"`
		PromptTokens    int       `json:"prompt_tokens"`
		NewTokens       int       `json:"new_tokens"`
		Injected        Agreement `json:"injected"`
		Stock           Agreement `json:"stock"`
		InjectedVsStock Agreement `json:"injected_vs_stock"`
		// Runtime is the same decoding under the package's graph runtime (absent when not run).
		Runtime *struct {
			Graphs   bool             `json:"graphs"` // false: the runtime ran eagerly (Reason)
			Reason   string           `json:"reason,omitempty"`
			Stock    RuntimeAgreement `json:"stock"`
			Injected RuntimeAgreement `json:"injected"`
		} `json:"runtime,omitempty"`
	} `json:"generation,omitempty"`
	Latency struct {
		Measured        bool              `json:"measured"`
		Reason          string            `json:"reason,omitempty"`
		Mode            string            `json:"mode,omitempty"`  // eager, graph or both
		Paths           []string          `json:"paths,omitempty"` // the paths measured
		Method          string            `json:"method,omitempty"`
		Default         string            `json:"default,omitempty"` // the product's default path
		Errors          map[string]string `json:"errors,omitempty"`  // path -> why it has no numbers
		Prefill         []LatencyRow      `json:"prefill,omitempty"`
		Decode          []LatencyRow      `json:"decode,omitempty"`
		Forward         []LatencyRow      `json:"forward,omitempty"`
		PeakMemoryBytes map[string]int64  `json:"peak_memory_bytes,omitempty"`
		// Points is the --latency-points preset (quick or full; "" in older files), PointsFlags
		// the flags that replaced its lists (--prefill, --decode-batches) and FullAdds what full
		// would add after quick, by kind (prefill, decode, forward).
		Points      string           `json:"points,omitempty"`
		PointsFlags []string         `json:"points_flags,omitempty"`
		FullAdds    map[string][]int `json:"full_adds,omitempty"`
		// CompileAhead is what the helper processes compiled before the latency stage (absent
		// where the eval started none).
		CompileAhead *CompileAhead `json:"compile_ahead,omitempty"`
	} `json:"latency"`
	// Roofline is a mixture-of-experts model's active-bytes roofline (absent for a dense model).
	Roofline *Roofline `json:"roofline,omitempty"`
	// Autotune is what the kernels tuned during the run (the package's tuning_report): on a
	// GPU whose tuned configs ship with the package, Autotuned is 0. Absent from older files.
	Autotune *struct {
		GPUData     []string `json:"gpu_data"`
		Tuned       int      `json:"tuned"`
		Heuristic   int      `json:"heuristic"`
		Autotuned   int      `json:"autotuned"`
		Benchmarked int      `json:"benchmarked"`
	} `json:"autotune,omitempty"`
	// Timings is where the run's time went: the stages in order, the CLI's before the eval
	// driver's, and the whole run's wall. Absent from older files.
	Timings *Timings `json:"timings,omitempty"`
}

// CompileAhead is eval.json latency `compile_ahead`: each helper process's compiled path and wall
// seconds (or why it failed or had no job) and the points it timed, the points the eval timed
// itself instead, and how many of the eval's own compiles loaded their graph from the inductor
// cache.
type CompileAhead struct {
	Helpers []struct {
		Side    string   `json:"side"`
		Path    string   `json:"path,omitempty"`
		S       Num      `json:"s,omitempty"`
		Timed   []string `json:"timed,omitempty"`
		Error   string   `json:"error,omitempty"`
		Skipped string   `json:"skipped,omitempty"`
	} `json:"helpers"`
	Fallbacks []struct {
		Path  string `json:"path"`
		Point string `json:"point"`
		Why   string `json:"why"`
	} `json:"fallbacks,omitempty"`
	DriverCache map[string]int `json:"driver_cache,omitempty"`
}

// Timings are the wall seconds of a run's stages.
type Timings struct {
	// StartedAt is when the eval driver started, in seconds since the Unix epoch.
	StartedAt float64 `json:"started_at,omitempty"`
	// DriverS is the eval driver's wall, from its start to its result.
	DriverS Num `json:"driver_s"`
	// WallS is the whole command's wall, from its start to the report (0: not recorded).
	WallS  Num         `json:"wall_s,omitempty"`
	Stages []StageTime `json:"stages"`
}

// StageTime is one named part of a run and its wall seconds.
type StageTime struct {
	Stage string `json:"stage"`
	S     Num    `json:"s"`
	// Compiles counts the Triton JIT compiles during the stage (kernels made, not run).
	Compiles int `json:"compiles,omitempty"`
}

// Other is the part of the wall no stage names.
func (t *Timings) Other() float64 {
	var sum float64
	for _, s := range t.Stages {
		sum += float64(s.S)
	}
	return float64(t.WallS) - sum
}

// ReadResult parses an eval.json.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	return ParseResult(b, path)
}

// ParseResult reads an eval.json's bytes; path names it in errors.
func ParseResult(b []byte, path string) (*Result, error) {
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("harness: %s: %s", path, models.JSONError(err))
	}
	if r.Schema != Schema && r.Schema != 2 {
		return nil, fmt.Errorf("harness: %s: schema %d, this build reads schemas 2 and %d", path, r.Schema, Schema)
	}
	if r.Device.Count == 0 {
		r.Device.Count = 1
	}
	return &r, nil
}

// HalfDtype names what the stock and injected models ran in ("bf16" or "fp16"); files written
// before the eval recorded it ran in bf16.
func (r *Result) HalfDtype() string {
	if r.Model.Dtype == "" {
		return "bf16"
	}
	return r.Model.Dtype
}

// Untrained reports whether the fp32 model itself predicts the text no better than chance
// (its perplexity at least half the vocabulary, which a uniform guess reaches): its weights
// are random (as the shipped fixtures' are), untrained, or cut to a few layers. Its absolute
// figures (perplexity, relative errors, generated text) then mean nothing; the injected /
// stock ratios still say what the kernels cost.
func (r *Result) Untrained() bool {
	p := r.Accuracy.OraclePerplexity
	return p != nil && r.Model.VocabSize > 0 && float64(*p) >= 0.5*float64(r.Model.VocabSize)
}

// UntrainedNote is what the report says of an untrained model.
func (r *Result) UntrainedNote() string {
	return fmt.Sprintf("the fp32 model itself predicts this text no better than chance (perplexity %s, "+
		"vocabulary %d): its weights are random (as the shipped fixtures' are), untrained or cut to a few "+
		"layers, so its perplexity, relative errors and generated text mean nothing. Read the injected / stock "+
		"ratios instead: near 1× means the kernels cost no accuracy beyond %s itself.",
		f(*r.Accuracy.OraclePerplexity), r.Model.VocabSize, r.HalfDtype())
}
