package main

import (
	"bytes"
	"encoding/json"
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
		"NAME               REPLACES                               LAYER                               BACKENDS  DTYPES                     CONSTRAINTS",
		"rmsnorm            rmsnorm                                RMSNorm                             cuda,xpu  bf16,fp16 <- F32,F16,BF16  hidden >= 1",
		"gemm               mlp-swiglu,linear-bn,bn-linear,linear  SwiGLUMLP,LinearBN,BNLinear,Linear  cuda,xpu  bf16,fp16 <- F32,F16,BF16  K >= 16 and N >= 16; note: tensor-descriptor path when K*2 and N*2 bytes are multiples of 16; fallback path otherwise",
		"attention-prefill  attention                              Attention,attention_forward()       cuda,xpu  bf16,fp16 <- F32,F16,BF16  q/k/v/o projections (Llama-family attention); head_dim in {32, 64, 80, 96, 128}; heads % kv_heads == 0; uses attention-decode, rope, gemm",
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
		"  gemm: qkv_proj K=2048 N=3072: 0.74x cuBLAS at M=2048 (Llama-3.2-1B qkv); H200, BENCHMARKS.md 2026-11-29\n",
		"  attention-prefill: causal prefill at head_dim 64 and 128: ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
}
