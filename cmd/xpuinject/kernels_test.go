package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
)

// The table itself is golden-tested (TestKernelsTableGolden); here: the rows people look for.
func TestKernelsTable(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "kernels")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"KERNEL             REPLACES                                 LAYER CLASS\n",
		"rmsnorm            rmsnorm, rmsnorm-gemma, rmsnorm-fp32     RMSNorm, GemmaRMSNorm, FP32RMSNorm\n",
		"gemm               mlp-swiglu, mlp-geglu, linear-bn,        SwiGLUMLP, GeGLUMLP, LinearBN, BNLinear,\n",
		"attention-prefill  attention                                Attention, FusedAttention,\n",
		"moe                moe-swiglu                               SparseMoE, SharedExpertMoE, RouterMoE\n",
		"Decoder layers (MoEDecoderLayer, ScaledMoEDecoderLayer, GemmaDecoderLayer,",
		"attention-prefill  q/k/v/o projections, or a fused qkv_proj and o_proj (Phi-3); head_dim in {32, 64,\n",
		"Every kernel: backends cuda, xpu; computes in bf16, fp16; weights from F32, F16, BF16.\n",
		"Vendor routes measured on h200 (kernels/python/xpuinject_kernels/gpus/h200.json)",
		"gemm               qkv_proj K=2048 N=3072               cuBLAS  0.81x at M=1, 0.84x at M=8, 0.75x at\n",
		"gemm               down_proj K=8192 N=2048 at short     cuBLAS  1.16x at M=1, 1.13x at M=8, 0.56x at\n",
		"attention-prefill  causal prefill at head_dim 64        SDPA    0.95x at S=512, 0.79x at S=2048,",
		"  gate_up_proj K=2048 N=16384 stays on our kernel:",
		fmt.Sprintf("Tuned launch configs: %d (a launch they cover skips autotuning); ", len(kernels.Default().GPU().Tuned)),
		"none slower; `xpuinject kernels --tuned` lists them.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, nil, "kernels", "--gpu", "b200")
	if code != 0 || !strings.Contains(out, `No measured data for GPU "b200" (have: h100, h200): no vendor routes, and each kernel`) ||
		strings.Contains(out, "cuBLAS") {
		t.Errorf("--gpu b200: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCLI(t, nil, "kernels", "--gpu", "H100"); code != exitUsage || !strings.Contains(errOut, `GPU name "H100"`) {
		t.Errorf("--gpu H100: exit %d %s", code, errOut)
	}
}

func TestKernelsJSON(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "kernels", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Kernels []struct {
			Name        string            `json:"name"`
			Module      string            `json:"module"`
			Replaces    []string          `json:"replaces"`
			Layers      map[string]string `json:"layers"`
			Backends    []string          `json:"backends"`
			Constraints []struct {
				Text string `json:"text"`
			} `json:"constraints"`
		} `json:"kernels"`
		// the GPU's data as its file holds it: tools match routes without Go code
		GPU struct {
			Name   string `json:"gpu"`
			Routes []struct {
				Kernel   string  `json:"kernel"`
				Op       string  `json:"op"`
				GEMM     string  `json:"gemm"`
				K        int64   `json:"k"`
				N        int64   `json:"n"`
				Tokens   string  `json:"tokens"`
				HeadDims []int64 `json:"head_dims"`
				Measured []struct {
					Shape string  `json:"shape"`
					Ratio float64 `json:"ratio"`
				} `json:"measured"`
				Source string `json:"source"`
			} `json:"routes"`
		} `json:"gpu"`
		GPUFile string `json:"gpu_file"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	rows := doc.Kernels
	if len(rows) != 8 || rows[7].Name != "moe" || rows[7].Replaces[0] != "moe-swiglu" || rows[4].Name != "gemm" ||
		rows[4].Module != "gemm" || rows[4].Layers["linear-bn"] != "LinearBN" ||
		rows[5].Constraints[1].Text != "head_dim in {32, 64, 80, 96, 128, 256}" || rows[2].Name != "rmsnorm-add" ||
		rows[2].Replaces[1] != "rmsnorm-fp32" || rows[2].Layers["rmsnorm-fp32"] != "FP32RMSNorm" {
		t.Fatalf("rows %+v", rows)
	}
	if doc.GPU.Name != "h200" || doc.GPUFile != "gpus/h200.json" {
		t.Fatalf("gpu %q file %q", doc.GPU.Name, doc.GPUFile)
	}
	got := map[string]string{}
	sources := map[string]bool{"docs/results/2026-11-29-h200/bench-v2.csv": true, "docs/results/2026-12-02-h200/tune-6.json": true}
	for _, r := range doc.GPU.Routes {
		got[fmt.Sprintf("%s %s K=%d N=%d %s %v", r.Kernel, r.Op, r.K, r.N, r.Tokens, r.HeadDims)] = r.Source
		if len(r.Measured) == 0 || !sources[r.Source] {
			t.Errorf("%s %s: measured %v source %q", r.Kernel, r.Op, r.Measured, r.Source)
		}
	}
	// the H200 decodes on our attention kernel: no decode route to SDPA
	if _, ok := got["attention-decode attention-decode K=0 [128]"]; ok {
		t.Errorf("an attention-decode route is back in gpus/h200.json")
	}
	bench, tune := "docs/results/2026-11-29-h200/bench-v2.csv", "docs/results/2026-12-02-h200/tune-6.json"
	for key, want := range map[string]string{
		"gemm qkv_proj K=2048 N=3072  []":                   bench,
		"gemm down_proj K=8192 N=2048 short []":             bench,
		"gemm down_proj K=14336 N=4096 short []":            bench,
		"gemm qkv_proj K=4096 N=6144 short []":              bench,
		"attention-prefill attention-prefill K=0 N=0  [64]": bench,
		"gemm qkv_proj K=2048 N=5120 short []":              tune,
		"gemm qkv_proj K=2048 N=5120 prefill []":            tune,
		"gemm o_proj K=4096 N=2048 prefill []":              tune,
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q", key, got[key], want)
		}
	}
	// the tune priced no decode-sized class: the Qwen3-30B-A3B shape decodes on our GEMV
	if _, ok := got["gemm qkv_proj K=2048 N=5120 decode []"]; ok {
		t.Errorf("a decode route from an isolated launch's timing")
	}
	if code, _, errOut := runCLI(t, nil, "kernels", "extra"); code != exitUsage {
		t.Fatalf("kernels extra: exit %d (%s)", code, errOut)
	}
}

// The tuned view's rows people look for, its order and its JSON; the table is golden-tested.
func TestKernelsTuned(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "kernels", "--tuned")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Tuned launch configs on h200 (kernels/python/xpuinject_kernels/gpus/h200.json), one row per problem\n",
		"gemm, 126 problem classes; CONFIG is BLOCK_M, BLOCK_N, BLOCK_K, GROUP_SIZE_M, num_warps, num_stages\n",
		"EPILOGUE  M_BUCKET  K      N       CONFIG             TUNED    HEURISTIC      AUTOTUNE       FROM\n",
		"none      2048      1024   4096    128/256/64/16/8/3  33.34    33.55 1.01x    33.55 1.01x    [4]\n",
		// the decode-step GEMV entries: every M, no times
		"none      any       2048   2048    64/128/4/4/3   -       -             -         [6]\n",
		"[4] 2026-12-02, docs/results/2026-12-02-h200/tune-1.log\n",
		"none slower.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "\nattention.decode, "), strings.Index(out, "\nmoe.prefill, "); i < 0 || j < i {
		t.Errorf("groups out of order:\n%s", out)
	}

	code, out, errOut = runCLI(t, nil, "kernels", "--tuned", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var doc struct {
		GPU     string `json:"gpu"`
		GPUFile string `json:"gpu_file"`
		Tuned   []struct {
			Kernel      string         `json:"kernel"`
			Key         map[string]any `json:"key"`
			Config      map[string]int `json:"config"`
			US          *float64       `json:"us"`
			HeuristicUS *float64       `json:"heuristic_us"`
			AutotuneUS  *float64       `json:"autotune_us"`
			Source      string         `json:"source"`
			Command     string         `json:"command"`
		} `json:"tuned"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	gpu := kernels.Default().GPU()
	if doc.GPU != "h200" || doc.GPUFile != "gpus/h200.json" || len(doc.Tuned) != len(gpu.Tuned) {
		t.Fatalf("file %q, %d entries, want %d", doc.GPUFile, len(doc.Tuned), len(gpu.Tuned))
	}
	// every entry once, with its file's times (MoE ms as µs)
	byKey := map[string]kernels.TunedTimes{}
	for _, e := range gpu.Tuned {
		tt, _ := e.Times()
		byKey[fmt.Sprint(e.Kernel, e.Key)] = tt
	}
	show := func(v *float64) string {
		if v == nil {
			return "null"
		}
		return fmt.Sprintf("%.6g", *v)
	}
	for i, e := range doc.Tuned {
		want, ok := byKey[fmt.Sprint(e.Kernel, e.Key)]
		delete(byKey, fmt.Sprint(e.Kernel, e.Key))
		if got := show(e.US) + show(e.HeuristicUS) + show(e.AutotuneUS); !ok ||
			got != show(want.US)+show(want.HeuristicUS)+show(want.AutotuneUS) || e.Source == "" || e.Command == "" {
			t.Errorf("entry %d %s %v: times %s, want %v (%v)", i, e.Kernel, e.Key, got, want, ok)
		}
		if i > 0 && doc.Tuned[i-1].Kernel > e.Kernel {
			t.Errorf("entry %d: %s after %s", i, e.Kernel, doc.Tuned[i-1].Kernel)
		}
	}
	first := doc.Tuned[0]
	if first.Kernel != "attention.decode" || first.Key["head_dim"] != 64.0 || first.Key["single"] != true ||
		first.Config["BLOCK_N"] != 64 {
		t.Errorf("first entry %+v", first)
	}
	if code, out, _ := runCLI(t, nil, "kernels", "--tuned", "--json", "--gpu", "b200"); code != 0 ||
		!strings.Contains(out, `"gpu_file": "",`) || !strings.Contains(out, `"tuned": []`) {
		t.Errorf("--gpu b200: exit %d\n%s", code, out)
	}
}

// A slower tuned config is counted, and rows sort by the launcher's key fields, a field a
// key leaves out first.
func TestKernelsTunedFixture(t *testing.T) {
	entry := func(key, measured, src string) string {
		return `{"kernel": "gemv", "key": {` + key + `}, "config": {"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 1,
			"num_warps": 4, "num_stages": 3}, "measured": ` + measured + `, "date": "d", "command": "c", "source": "` + src + `"}`
	}
	for _, c := range []struct {
		entries []string
		want    []string
	}{
		{[]string{
			entry(`"epilogue": "none", "m_bucket": 8, "k": 1024, "n": 4096`, `{"us": 5, "heuristic_us": 6, "autotune_us": 4}`, "a"),
			entry(`"epilogue": "none", "m_bucket": 1, "k": 1024, "n": 4096`, `{"us": 4, "heuristic_us": 4}`, "b"),
			entry(`"epilogue": "none", "k": 1024, "n": 4096`, `{"shape": "x"}`, "a"),
			entry(`"epilogue": "bias", "m_bucket": 8, "k": 1024, "n": 128`, `{"us": 2, "autotune_us": 2}`, "a"),
		}, []string{
			"gemv, 4 problem classes; CONFIG is BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages\n" +
				"EPILOGUE  M_BUCKET  K     N     CONFIG        TUNED  HEURISTIC   AUTOTUNE    FROM\n" +
				"bias      8         1024  128   32/256/1/4/3  2.00   -           2.00 1.00x  [1]\n" +
				"none      any       1024  4096  32/256/1/4/3  -      -           -           [1]\n" +
				"none      1         1024  4096  32/256/1/4/3  4.00   4.00 1.00x  -           [2]\n" +
				"none      8         1024  4096  32/256/1/4/3  5.00   6.00 1.20x  4.00 0.80x  [1]\n\n" +
				"[1] d, a\n[2] d, b\n",
			"Of 4: 2 timed against the autotuner's pick, 2 against the heuristic config, 1 slower than the " +
				"autotuner's pick.",
		}},
		{[]string{
			entry(`"k": 1024`, `{"us": 5, "heuristic_us": 4, "autotune_us": 4}`, "a"),
			entry(`"k": 2048`, `{"us": 5, "heuristic_us": 4}`, "a"),
		}, []string{"1 timed against the autotuner's pick, 2 against the heuristic config, 1 slower than the " +
			"autotuner's pick and 2 than the heuristic config."}},
		{[]string{entry(`"k": 1024`, `{"us": 5, "heuristic_us": 4, "autotune_us": 5}`, "a")},
			[]string{"gemv, 1 problem class; CONFIG", "K     CONFIG", "1 against the heuristic config, 1 slower than the heuristic config."}},
		// a switch an entry sets: named in the header, marked on its row only
		{[]string{
			strings.Replace(entry(`"k": 1024`, `{"us": 5}`, "a"), `"SPLIT_K": 1,`, `"SPLIT_K": 1, "EW": 1,`, 1),
			strings.Replace(entry(`"k": 2048`, `{"us": 5}`, "a"), `"SPLIT_K": 1,`, `"SPLIT_K": 1, "EW": 0,`, 1),
		}, []string{"CONFIG is BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages (+EW where set)",
			"1024  32/256/1/4/3+EW  5.00", "2048  32/256/1/4/3     5.00"}},
	} {
		doc := `{"gpu": "x", "devices": ["X"], "tuned": [` + strings.Join(c.entries, ", ") + `]}`
		gpu, err := kernels.ParseGPU([]byte(doc), "gpus/x.json")
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := tunedRun(&b, gpu, false); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		flat := strings.Join(strings.Fields(out), " ") // the summary, as one line
		for _, want := range c.want {
			if !strings.Contains(out, want) && !strings.Contains(flat, want) {
				t.Errorf("missing %q in\n%s", want, out)
			}
		}
		fitsWidth(t, "tuned", out)
	}
}
