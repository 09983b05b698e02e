package harness

import (
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/inject/outdir"
)

func TestReadResultAndReport(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(r.Layers[1].Stock.MeanRel); !math.IsNaN(got) {
		t.Fatalf("null should read as NaN, got %v", got)
	}
	dir := filepath.Join(t.TempDir(), "eval")
	tx, err := outdir.Begin(dir, outdir.Options{Kind: outdir.KindEval, Tool: "xpuinject test"})
	if err != nil {
		t.Fatal(err)
	}
	files, err := WriteReport(r, tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if files.Markdown != "report.md" || !slices.Equal(files.Plots, []string{"layers.png", "latency.png"}) {
		t.Fatalf("files %+v, want names relative to the eval folder", files)
	}
	md, _ := os.ReadFile(filepath.Join(dir, files.Markdown))
	for _, want := range []string{
		"# xpuinject report: llama-1b (llama)",
		"1 module kept; 12 packed tensors loaded, 2.4 MB (of 14 packed; 2 of kept modules, whose own weights serve)\n",
		"- launch configs: 7 problem classes from tuned configs (tuned configs from gpus/h200.json), 3 from heuristic " +
			"configs derived from their shapes, 2 autotuned (1 benchmarked)\n",
		"| max abs error | 0.31 | 0.35 | 0.89× |",
		"| max rel error (floor 0.02) | 4.2 | 4 | 1.05× |",
		"| top-1 agreement | 0.981 | 0.979 | — |",
		"| perplexity (oracle 12.5) | 12.6 | 12.61 | 1.00× |",
		"### Greedy generation (128 new tokens after each of 4 32-token prompts)",
		"| injected vs oracle | 80.0% | 50.0% | 1 / 0 |",
		"| stock vs oracle | 78.0% | 45.0% | 0 / 1 |",
		"less than 0.35 apart",
		"| injected vs oracle | 1 | 9 | [60 67] | 0.06 | 0.06 | injected 0 | tie |",
		"| stock vs oracle | 2 | 12 | [1194 905] | 0.025 | 0.5 | stock 0.0625 | not a tie |",
		"The same decoding under the package's graph runtime (captured device graphs):",
		"| stock | 100.0% | 100.0% | 0 / 0 | 45.0% |",
		"| injected | 95.0% | 90.0% | 1 / 0 | 50.0% |",
		"| injected graph vs injected eager | 3 | 115 | [11 12] | 0.01 | 0.01 | injected 0.002 | tie |",
		"| model.layers.1 | 0.008 | NaN | — |",
		"| prefill tokens (batch 1) | stock eager ms | stock compiled ms | stock graph ms | injected graph ms | injected eager ms | " +
			"injected graph / stock compiled | injected graph / stock graph | injected eager / stock eager |",
		"| 128 | 12 | 3 | 3.3 | 2.4 | 11 | 0.80× | 0.73× | 0.92× |",
		"| 2048 | 21 | 18 | 19 | 19.5 | 20 | 1.08× | 1.03× | 0.95× |",
		// a path with no number for this point reads as a dash, and so do its ratios
		"| 1 | 16 | 1.55 | 2.57 | 1.55 | — | 1.00× | 0.60× | — |",
		"| prefill 128 | stock compiled compile 41.5 s; stock graph capture 0.80 s; injected graph capture 1.20 s |",
		"| decode 1 | stock compiled compile 30.2 s; stock graph capture 0.50 s; injected graph capture 0.90 s |",
		"- injected eager: no numbers: decode batch 1: RuntimeError: out of memory",
		"Peak memory during the longest prefill: stock 3000.0 MB, injected 2900.0 MB.",
		"| `lm_head` | plain GEMM |",
		"![layers](layers.png)", "![latency](latency.png)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if len(files.Plots) != 2 {
		t.Fatalf("plots: %v", files.Plots)
	}
	for _, p := range files.Plots {
		fh, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// The chart must contain the injected series colour (bars were drawn).
		found := false
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y && !found; y += 2 {
			for x := b.Min.X; x < b.Max.X; x += 2 {
				r, g, bb, _ := img.At(x, y).RGBA()
				if r>>8 == uint32(colInjected.R) && g>>8 == uint32(colInjected.G) && bb>>8 == uint32(colInjected.B) {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("%s: no injected bars drawn", filepath.Base(p))
		}
	}
}

func TestReportCPUSaysLatencyNotMeasured(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	r.Latency.Measured = false
	r.Latency.Reason = "not measured on the CPU: the kernels ran under the Triton interpreter"
	md := string(Markdown(r, nil))
	if !strings.Contains(md, "Not measured: not measured on the CPU") || strings.Contains(md, "prefill tokens") {
		t.Errorf("latency section wrong:\n%s", md)
	}
}

// The report names what the stock and injected models ran in: bf16 when eval.json does not say.
func TestReportNamesTheModelsDtype(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	r.Model.Dtype = ""
	if md := string(Markdown(r, nil)); !strings.Contains(md, "| metric | injected bf16 | stock bf16 |") {
		t.Errorf("no bf16 columns:\n%s", md)
	}
	r.Model.Dtype = "fp16"
	md := string(Markdown(r, nil))
	if !strings.Contains(md, "| metric | injected fp16 | stock fp16 |") || !strings.Contains(md, "Both fp16 models") ||
		strings.Contains(md, "bf16") {
		t.Errorf("fp16 run reported as bf16:\n%s", md)
	}
}

func TestReadResultRejects(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"schema": 1}`), 0o644)
	if _, err := ReadResult(bad); err == nil || !strings.Contains(err.Error(), "schema 1, this build reads schemas 2 and 3") {
		t.Errorf("want schema error, got %v", err)
	}
	os.WriteFile(bad, []byte(`{"schema": 2, "accuracy": NaN}`), 0o644)
	if _, err := ReadResult(bad); err == nil {
		t.Error("invalid JSON accepted")
	}
	if _, err := ReadResult(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}

// A schema 2 file is one device with no placement; schema 3 says which devices ran what, and
// the report shows it.
func TestReportPlacement(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	if r.Device.Count != 1 || r.Device.Placement != nil {
		t.Fatalf("schema 2: count %d, placement %+v; want 1 device, none", r.Device.Count, r.Device.Placement)
	}
	if md := string(Markdown(r, nil)); strings.Contains(md, "## Placement") || !strings.Contains(md, "- device: cuda (NVIDIA H200)\n") {
		t.Errorf("schema 2 report:\n%s", md)
	}
	var doc map[string]any
	b, _ := os.ReadFile("testdata/eval-gpu.json")
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc["schema"] = 3
	stage := func(rank int, layers []int, embed, head bool, bytes int64) map[string]any {
		return map[string]any{"rank": rank, "host": "h200-a", "device": fmt.Sprintf("cuda:%d", rank), "layers": layers,
			"embeddings": embed, "norm": head, "head": head, "bytes": bytes}
	}
	pipe := map[string]any{"mode": "pipeline", "stages": []any{stage(0, []int{0, 16}, true, false, 8_000_000_000),
		stage(1, []int{16, 32}, false, true, 8_100_000_000)}}
	doc["device"] = map[string]any{"type": "cuda", "name": "NVIDIA H200", "interpret": false, "count": 2,
		"placement": map[string]any{"stock": pipe, "injected": pipe, "oracle": map[string]any{
			"mode": "layered", "rank": 0, "host": "h200-a", "device": "cuda:0", "units": 35, "kept_units": 12,
			"kept_bytes": 10_000_000_000, "budget_bytes": 10_500_000_000, "loads": 1200, "streamed_loads": 1150}}}
	b, _ = json.Marshal(doc)
	p := filepath.Join(t.TempDir(), "eval.json")
	os.WriteFile(p, b, 0o644)
	if r, err = ReadResult(p); err != nil {
		t.Fatal(err)
	}
	md := string(Markdown(r, nil))
	for _, want := range []string{
		"- device: cuda (NVIDIA H200) ×2, one pipeline stage each\n",
		"The bf16 models were split into 2 pipeline stages",
		"| stock bf16 | 0 | h200-a | cuda:0 | 0–15 (16 layers) | embeddings | 8000.0 |",
		"| injected bf16 | 1 | h200-a | cuda:1 | 16–31 (16 layers) | final norm, head | 8100.0 |",
		"fp32 oracle (rank 0 on h200-a, cuda:0): read from the checkpoint unit by unit",
		"12 of 35 units stayed on the device (10000.0 MB of a 10500.0 MB budget), the others were read from the checkpoint again on every pass: 1200 loads in all.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// the streamed units copied from host memory after their first read
	oracle := doc["device"].(map[string]any)["placement"].(map[string]any)["oracle"].(map[string]any)
	oracle["host_budget_bytes"], oracle["host_bytes"], oracle["host_loads"] = 60_000_000_000, 6_100_000_000, 1127
	b, _ = json.Marshal(doc)
	os.WriteFile(p, b, 0o644)
	if r, err = ReadResult(p); err != nil {
		t.Fatal(err)
	}
	want := "12 of 35 units stayed on the device (10000.0 MB of a 10500.0 MB budget), the others were loaded again " +
		"on every pass: 1200 loads in all, 1127 of them copied from the 6100.0 MB of checkpoint tensors held in host " +
		"memory rather than read from the checkpoint."
	if md := string(Markdown(r, nil)); !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
}

// A stage's decoder layers [start, end) show with their count: [0, 1) is layer 0, one layer.
func TestLayerRange(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{[]int{0, 1}, "0 (1 layer)"}, {[]int{0, 16}, "0–15 (16 layers)"}, {[]int{16, 32}, "16–31 (16 layers)"},
		{[]int{3, 3}, "none"}, {nil, "none"}} {
		if got := layerRange(c.in); got != c.want {
			t.Errorf("layerRange(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The report says when the weights are random and what to read instead.
func TestReportSaysWhenWeightsAreRandom(t *testing.T) {
	r, err := ReadResult("../cmd/xpuinject/testdata/eval-random.json")
	if err != nil {
		t.Fatal(err)
	}
	md := string(Markdown(r, nil))
	want := "> **Random or untrained weights.** The fp32 model itself predicts this text no better than chance " +
		"(perplexity 966.43, vocabulary 512): its weights are random (as the shipped fixtures' are), untrained or " +
		"cut to a few layers, so its perplexity, relative errors and generated text mean nothing. Read the " +
		"injected / stock ratios instead: near 1× means the kernels cost no accuracy beyond bf16 itself.\n"
	if !r.Untrained() || !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
	gpu, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	gpu.Model.VocabSize = 128256 // perplexity 12.5: a trained model
	if gpu.Untrained() || strings.Contains(string(Markdown(gpu, nil)), "untrained weights") {
		t.Error("a trained model's report says its weights are random")
	}
}

// A mixture-of-experts model's stock is timed on each experts implementation: the report heads
// its tables with the fastest (stock best), lists every setting with the anchor in bold, says
// why a setting could not run, and sets decode at batch 1 against the active-bytes roofline.
func TestReportMoEStockSettingsAndRoofline(t *testing.T) {
	r, err := ReadResult("testdata/eval-moe-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	x := r.Latency.Decode[0]
	if pair, ratio, ok := x.Headline(); !ok || pair != [2]string{PathInjectedGraph, PathStockBest} || ratio != 0.6 {
		t.Errorf("headline %v %v %v, want injected graph / stock best 0.6", pair, ratio, ok)
	}
	md := string(Markdown(r, nil))
	for _, want := range []string{
		"| decode batch (512-token prompt) | stock eager ms/token | stock compiled ms/token | stock best ms/token | " +
			"stock graph ms/token | injected graph ms/token | injected compiled ms/token | injected graph / stock best | " +
			"injected compiled / stock best | injected graph / stock compiled | injected compiled / stock compiled | " +
			"injected graph / stock graph |",
		"| 1 | 30 | 4 | 4 | 5 | 2.4 | 2.6 | 0.60× | 0.65× | 0.60× | 0.65× | 0.48× |",
		"stock compiled is transformers' StaticCache under torch.compile(mode=\"reduce-overhead\"); injected compiled",
		"### Stock on each experts implementation",
		"| point | experts_implementation | stock eager | stock compiled |",
		"| prefill 2048 | eager | 400 | — |",
		"| prefill 2048 | grouped_mm | 90 | **60** |",
		"| decode 1 | batched_mm | 30 | **4** |",
		"| decode 1 | grouped_mm | 35 | 4.5 |",
		"- stock compiled, eager experts (prefill 2048, decode 1): Unsupported: Dynamic shape operator",
		"## Active-bytes roofline at batch 1",
		": 5.481 GB / 4.2 TB/s = **1.3049 ms** per token (bf16, top-8 experts; every expert's weights would be 57.982 GB).",
		"| top-k experts | 3623.879 | 66.1 % |",
		"| embedding row | 0.004 | 0.0 % |",
		"Decode at batch 1: stock eager 30 ms (22.99× the roofline), stock compiled 4 ms (3.07× the roofline), " +
			"stock best 4 ms (3.07× the roofline), stock graph 5 ms (3.83× the roofline), injected graph 2.4 ms " +
			"(1.84× the roofline), injected compiled 2.6 ms (1.99× the roofline).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "the fastest stock path and the anchor") || strings.Contains(md, "| other |") {
		t.Error("a part of zero bytes named other is listed")
	}
	// a dense model's report has neither section
	dense, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	md = string(Markdown(dense, nil))
	if strings.Contains(md, "experts") || strings.Contains(md, "roofline") || strings.Contains(md, "stock best") {
		t.Errorf("dense report mentions experts or a roofline:\n%s", md)
	}
}

func TestReportPeakMemoryNotMeasured(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	r.Latency.PeakMemoryBytes = map[string]int64{"injected": 2_500_000_000}
	r.Latency.Errors = map[string]string{"peak memory stock": "OutOfMemoryError: CUDA out of memory."}
	md := string(Markdown(r, nil))
	want := "Peak memory during the longest prefill: stock not measured (OutOfMemoryError: CUDA out of memory.), " +
		"injected 2500.0 MB."
	if !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
}

// The latency section says which points were timed and, after quick, what full would add; a file
// that does not record the preset gets no such line.
func TestReportSaysWhichPointsWereTimed(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	if md := string(Markdown(r, nil)); strings.Contains(md, "Points timed") {
		t.Errorf("a file without latency.points has a points line:\n%s", md)
	}
	one := func(rows []LatencyRow) []LatencyRow { return rows[:1] }
	prefill := r.Latency.Prefill
	decode := []LatencyRow{r.Latency.Decode[0], {Batch: 8, MS: map[string]Num{PathStockEager: 20}}}
	for _, c := range []struct {
		name, points string
		flags        []string
		adds         map[string][]int
		prefill      []LatencyRow
		decode       []LatencyRow
		want         string
	}{
		{"quick", "quick", nil, map[string][]int{"decode": {8}}, one(prefill), one(decode),
			"Points timed (`--latency-points quick`): prefill 128; decode batch 1; " +
				"`--latency-points full` adds decode batch 8.\n"},
		{"full", "full", nil, nil, one(prefill), decode,
			"Points timed (`--latency-points full`): prefill 128; decode batches 1 and 8.\n"},
		{"quick with --prefill", "quick", []string{"--prefill"}, map[string][]int{"decode": {8}}, prefill, one(decode),
			"Points timed (`--latency-points quick`, `--prefill` given): prefill 128 and 2048; decode batch 1; " +
				"`--latency-points full` adds decode batch 8.\n"},
		{"quick with both lists", "quick", []string{"--prefill", "--decode-batches"}, nil, prefill, decode,
			"Points timed (`--latency-points quick`, `--prefill` given, `--decode-batches` given): " +
				"prefill 128 and 2048; decode batches 1 and 8.\n"},
	} {
		r.Latency.Points, r.Latency.PointsFlags, r.Latency.FullAdds = c.points, c.flags, c.adds
		r.Latency.Prefill, r.Latency.Decode = c.prefill, c.decode
		if md := string(Markdown(r, nil)); !strings.Contains(md, c.want) {
			t.Errorf("%s: report lacks %q:\n%s", c.name, c.want, md)
		}
	}

	// a vision model: batches, and full adds batch 1
	r.Latency.Prefill, r.Latency.Decode, r.Latency.PointsFlags = nil, nil, nil
	r.Latency.Forward = []LatencyRow{{Batch: 32, MS: map[string]Num{PathStockEager: 2}}}
	r.Latency.Points, r.Latency.FullAdds = "quick", map[string][]int{"forward": {1}}
	want := "Points timed (`--latency-points quick`): batch 32; `--latency-points full` adds batch 1.\n"
	if md := string(Markdown(r, nil)); !strings.Contains(md, want) {
		t.Errorf("vision: report lacks %q:\n%s", want, md)
	}
}

func TestReportSaysWhatHelpersCompiledAheadAndWhetherTheEvalHitTheCache(t *testing.T) {
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	if md := string(Markdown(r, nil)); strings.Contains(md, "Compiled ahead") {
		t.Errorf("a file without latency.compile_ahead has a compile-ahead line:\n%s", md)
	}
	var c CompileAhead
	js := `{"helpers": [{"side": "stock", "path": "stock_compiled", "s": 38.7},
		{"side": "injected", "error": "exit code 1"}],
		"driver_cache": {"fxgraph_hit": 2, "fxgraph_miss": 1}}`
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		t.Fatal(err)
	}
	r.Latency.CompileAhead = &c
	want := "Compiled ahead: helper processes compiled stock compiled (38.7 s) while the accuracy and " +
		"generation stages ran, into the inductor and Triton caches; the eval's own compiles found 2 of " +
		"3 graphs in the cache, so such a compile set-up is dynamo's trace, the cache load and the graph " +
		"recording; injected failed (exit code 1).\n"
	if md := string(Markdown(r, nil)); !strings.Contains(md, want) {
		t.Errorf("report lacks\n%s\ngot:\n%s", want, md)
	}
	// helpers that timed what they compiled; one point the eval timed itself
	var timed CompileAhead
	js = `{"helpers": [{"side": "stock", "path": "stock_compiled", "s": 30.1, "timed": ["prefill 512", "decode batch 1"]},
		{"side": "injected", "path": "injected_compiled", "s": 12, "timed": ["prefill 512"]}],
		"fallbacks": [{"path": "injected_compiled", "point": "decode batch 1", "why": "exit code -9"}],
		"driver_cache": {"fxgraph_hit": 1, "fxgraph_miss": 0}}`
	if err := json.Unmarshal([]byte(js), &timed); err != nil {
		t.Fatal(err)
	}
	r.Latency.CompileAhead = &timed
	want = "Compiled ahead: helper processes compiled stock compiled (30.1 s) and injected compiled (12.0 s) " +
		"while the accuracy and generation stages ran, and timed them there by the same code, the eval and " +
		"the other helper waiting through each timed loop; a compiled path's set-up above is its helper's; " +
		"injected compiled at decode batch 1 timed by the eval itself (exit code -9); the eval's own compiles " +
		"found 1 of 1 graphs in the cache, so such a compile set-up is dynamo's trace, the cache load and the " +
		"graph recording.\n"
	if md := string(Markdown(r, nil)); !strings.Contains(md, want) {
		t.Errorf("report lacks\n%s\ngot:\n%s", want, md)
	}
	r.Latency.CompileAhead = &c
	c.Helpers = c.Helpers[1:] // no helper compiled anything: no line
	if md := string(Markdown(r, nil)); strings.Contains(md, "Compiled ahead") {
		t.Errorf("a run whose helpers all failed has a compile-ahead line")
	}
}

// The report says when the plan's vendor routes were measured on another GPU than the eval's,
// and only then.
func TestRoutesLine(t *testing.T) {
	for _, c := range []struct {
		plan string
		dev  []string
		want string
	}{
		{"h200", []string{"gpus/h100.json"}, "the plan was made for `--gpu h200`, and this device's measured data is gpus/h100.json"},
		{"h200", []string{"gpus/h200.json"}, ""},
		{"h200", nil, ""}, // a device without data: nothing measured to compare with
		{"", []string{"gpus/h100.json"}, ""},
	} {
		got := routesLine(c.plan, c.dev)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("routesLine(%q, %v) = %q, want %q", c.plan, c.dev, got, c.want)
		}
	}
	r, err := ReadResult("testdata/eval-gpu.json")
	if err != nil {
		t.Fatal(err)
	}
	r.Injection.PlanGPU = "h100"
	if md := string(Markdown(r, nil)); !strings.Contains(md, "**vendor routes planned for another GPU:** the plan was made for `--gpu h100`") {
		t.Errorf("report without the routes line:\n%s", md[:min(len(md), 3000)])
	}
	r.Injection.PlanGPU = "h200"
	if md := string(Markdown(r, nil)); strings.Contains(md, "vendor routes planned for another GPU") {
		t.Error("the routes line on a plan of the eval device's GPU")
	}
}
