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
		"rmsnorm            rmsnorm, rmsnorm-gemma                   RMSNorm, GemmaRMSNorm\n",
		"gemm               mlp-swiglu, mlp-geglu, linear-bn,        SwiGLUMLP, GeGLUMLP, LinearBN, BNLinear,\n",
		"attention-prefill  attention                                Attention, attention_forward()\n",
		"attention-prefill  q/k/v/o projections, or a fused qkv_proj and o_proj (Phi-3); head_dim in {32, 64,\n",
		"Every kernel: backends cuda, xpu; computes in bf16, fp16; weights from F32, F16, BF16.\n",
		"Vendor routes measured on h200 (kernels/python/xpuinject_kernels/gpus/h200.json)",
		"gemm               qkv_proj K=2048 N=3072               cuBLAS  0.81x at M=1, 0.84x at M=8, 0.75x at\n",
		"gemm               down_proj K=8192 N=2048 at short     cuBLAS  1.16x at M=1, 1.13x at M=8, 0.56x at\n",
		"attention-prefill  causal prefill at head_dim 64        SDPA    0.95x at S=512, 0.79x at S=2048,",
		"  gate_up_proj K=2048 N=16384 stays on our kernel:",
		fmt.Sprintf("Tuned launch configs: %d (a launch they cover skips autotuning).\n", len(kernels.Default().GPU().Tuned)),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, nil, "kernels", "--gpu", "h100")
	if code != 0 || !strings.Contains(out, `No measured data for GPU "h100" (have: h200): no vendor routes, and each kernel`) ||
		strings.Contains(out, "cuBLAS") {
		t.Errorf("--gpu h100: exit %d\n%s", code, out)
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
	if len(rows) != 7 || rows[6].Name != "moe" || rows[6].Replaces[0] != "moe-swiglu" || rows[3].Name != "gemm" ||
		rows[3].Module != "gemm" || rows[3].Layers["linear-bn"] != "LinearBN" ||
		rows[4].Constraints[1].Text != "head_dim in {32, 64, 80, 96, 128, 256}" {
		t.Fatalf("rows %+v", rows)
	}
	if doc.GPU.Name != "h200" || doc.GPUFile != "gpus/h200.json" {
		t.Fatalf("gpu %q file %q", doc.GPU.Name, doc.GPUFile)
	}
	got := map[string]string{}
	for _, r := range doc.GPU.Routes {
		got[fmt.Sprintf("%s %s K=%d %v", r.Kernel, r.Op, r.K, r.HeadDims)] = fmt.Sprintf("%s %d %d %s", r.GEMM, r.K, r.N, r.Tokens)
		if len(r.Measured) == 0 || r.Source != "docs/results/2026-11-29-h200/bench-v2.csv" {
			t.Errorf("%s %s: measured %v source %q", r.Kernel, r.Op, r.Measured, r.Source)
		}
	}
	// the H200 decodes on our attention kernel: no decode route to SDPA
	if _, ok := got["attention-decode attention-decode K=0 [128]"]; ok {
		t.Errorf("an attention-decode route is back in gpus/h200.json")
	}
	for key, want := range map[string]string{
		"gemm qkv_proj K=2048 []":                      `qkv_proj 2048 3072 `,
		"gemm down_proj K=8192 []":                     `down_proj 8192 2048 short`,
		"gemm down_proj K=14336 []":                    `down_proj 14336 4096 short`,
		"gemm qkv_proj K=4096 []":                      `qkv_proj 4096 6144 short`,
		"attention-prefill attention-prefill K=0 [64]": ` 0 0 `,
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q", key, got[key], want)
		}
	}
	if code, _, errOut := runCLI(t, nil, "kernels", "extra"); code != exitUsage {
		t.Fatalf("kernels extra: exit %d (%s)", code, errOut)
	}
}
