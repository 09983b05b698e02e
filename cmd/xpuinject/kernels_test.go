package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestKernelsTable(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "kernels")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
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
