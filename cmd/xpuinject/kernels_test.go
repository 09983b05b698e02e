package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
)

func TestKernelsTable(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "kernels")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// the table, then a blank line and the vendor routes (TestKernelsListsVendorRoutes)
	lines := strings.Split(strings.SplitN(out, "\n\n", 2)[0], "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	want := []string{
		"NAME               REPLACES                                       LAYER                                      BACKENDS  DTYPES                     CONSTRAINTS",
		"rmsnorm            rmsnorm                                        RMSNorm                                    cuda,xpu  bf16,fp16 <- F32,F16,BF16  hidden >= 1",
		"gemm               mlp-swiglu,linear-bn,bn-linear,linear,lm-head  SwiGLUMLP,LinearBN,BNLinear,Linear,LMHead  cuda,xpu  bf16,fp16 <- F32,F16,BF16  K >= 16 and N >= 16; note: tensor-descriptor path when K*2 and N*2 bytes are multiples of 16; fallback path otherwise; note: swiglu gate_up K=2048 N=16384 kept: faster than every vendor path a model runs",
		"attention-prefill  attention                                      Attention,attention_forward()              cuda,xpu  bf16,fp16 <- F32,F16,BF16  q/k/v/o projections (Llama-family attention); head_dim in {32, 64, 80, 96, 128}; heads % kv_heads == 0; uses attention-decode, rope, gemm",
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			if l == w {
				found = true
			}
		}
		if !found {
			t.Errorf("no line\n%s\nin\n%s", w, out)
		}
	}
}

func TestKernelsJSON(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "kernels", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []struct {
		Name        string            `json:"name"`
		Module      string            `json:"module"`
		Replaces    []string          `json:"replaces"`
		Layers      map[string]string `json:"layers"`
		Backends    []string          `json:"backends"`
		Constraints []struct {
			Text string `json:"text"`
		} `json:"constraints"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 || rows[3].Name != "gemm" || rows[3].Module != "gemm" || rows[3].Layers["linear-bn"] != "LinearBN" ||
		rows[4].Constraints[1].Text != "head_dim in {32, 64, 80, 96, 128}" {
		t.Fatalf("rows %+v", rows)
	}
	// the vendor routes carry their match data, so tools can match them without Go code
	var routes []struct {
		Name      string `json:"name"`
		VendorOps []struct {
			Op       string  `json:"op"`
			GEMM     string  `json:"gemm"`
			K        int64   `json:"k"`
			N        int64   `json:"n"`
			MinTok   int64   `json:"min_tokens"`
			MaxTok   int64   `json:"max_tokens"`
			HeadDims []int64 `json:"head_dims"`
			Measured string  `json:"measured"`
		} `json:"vendor_ops"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, k := range routes {
		for _, r := range k.VendorOps {
			got[fmt.Sprintf("%s %s K=%d", k.Name, r.Op, r.K)] = fmt.Sprintf("%s %d %d tokens %d..%d %v", r.GEMM, r.K, r.N, r.MinTok, r.MaxTok, r.HeadDims)
			if !strings.Contains(r.Measured, "BENCHMARKS.md") {
				t.Errorf("%s %s: measured %q", k.Name, r.Op, r.Measured)
			}
		}
	}
	for key, want := range map[string]string{
		"gemm qkv_proj K=2048":                    `qkv_proj 2048 3072 tokens 0..0 []`,
		"gemm down_proj K=8192":                   `down_proj 8192 2048 tokens 0..64 []`,
		"gemm down_proj K=14336":                  `down_proj 14336 4096 tokens 0..64 []`,
		"gemm qkv_proj K=4096":                    `qkv_proj 4096 6144 tokens 0..64 []`,
		"attention-prefill attention-prefill K=0": ` 0 0 tokens 0..0 [64 128]`,
		"attention-decode attention-decode K=0":   ` 0 0 tokens 0..0 [64 128]`,
	} {
		if got[key] != want {
			t.Errorf("%s: %q, want %q", key, got[key], want)
		}
	}
	for _, field := range []string{`"gemm": "o_proj"`, `"k": 14336`, `"max_tokens": 64`, `"head_dims": [`} {
		if !strings.Contains(out, field) {
			t.Errorf("no %s in --json output", field)
		}
	}
	if code, _, errOut := runCLI(t, nil, "kernels", "extra"); code != exitUsage {
		t.Fatalf("kernels extra: exit %d (%s)", code, errOut)
	}
}

func TestKernelsListsVendorRoutes(t *testing.T) {
	var out bytes.Buffer
	if err := kernelsRun(&out, kernels.Default(), &kernelsOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nvendor routes (the layer stays replaced; this operation runs on the vendor path):\n",
		"  gemm: qkv_proj K=2048 N=3072: 0.71x cuBLAS at M=2048, 0.83x at M=16384, 0.77x at M=1, 0.75x at M=64; H200 2026-11-29, BENCHMARKS.md\n",
		"  gemm: down_proj K=8192 N=2048 at decode (M <= 64 tokens): with the fused residual 0.75x cuBLAS+add at M=1, ",
		"  attention-prefill: causal prefill at head_dim 64 and 128: ",
		"  attention-decode: decode (one query token per sequence) at head_dim 64 and 128: split-K decode ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
}
