// Command fakepython stands in for the Python interpreter in the CLI's eval tests: it
// answers xpuinject's probe (-c ...; with $XPUINJECT_FAKE_PYTHON_GPUS, comma-separated byte
// counts, it reports CUDA GPUs of that memory) and, run as the eval driver, appends its pid to
// $XPUINJECT_FAKE_PYTHON_PIDS and its arguments to $XPUINJECT_FAKE_PYTHON_ARGS, sleeps
// $XPUINJECT_FAKE_PYTHON_SLEEP (a Go duration) and writes a fixed eval.json to --out, so that
// an eval can be interrupted or observed without torch. $XPUINJECT_FAKE_PYTHON_FAIL=N fails
// the way a torchrun worker exiting N does: it prints its code, an error, and exits 1.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:])) }

// fakeEvalJSON is what the fake driver writes: a CPU run with two layers (one plot).
const fakeEvalJSON = `{"schema": 2,
 "model": {"path": "/models/synthetic", "arch": "llama", "class": "LlamaForCausalLM"},
 "device": {"type": "cpu", "name": "cpu", "interpret": true},
 "versions": {"torch": "2.11.0", "transformers": "5.17.0", "triton": "3.6.0"},
 "injection": {"path": "direct", "backend": "cpu", "replaced": {"RMSNorm": 2}, "replaced_modules": [], "kept": [], "packed_tensors": 2, "packed_bytes": 256},
 "accuracy": {"input": {"kind": "text", "source": "prose.txt (shipped with xpuinject)", "tokens": 96}, "oracle_perplexity": 12.5,
  "injected": {"cosine": 0.9999, "max_abs": 0.3, "mean_abs": 0.02, "max_rel": 4, "mean_rel": 0.01, "rel_floor": 0.02, "nonfinite": 0, "top1_agreement": 0.98, "kl": 0.001, "perplexity": 12.6},
  "stock": {"cosine": 0.9999, "max_abs": 0.3, "mean_abs": 0.02, "max_rel": 4, "mean_rel": 0.01, "rel_floor": 0.02, "nonfinite": 0, "top1_agreement": 0.98, "kl": 0.001, "perplexity": 12.6}},
 "layers": [
  {"name": "model.layers.0", "injected": {"cosine": 1, "max_abs": 0.1, "mean_abs": 0.01, "max_rel": 1, "mean_rel": 0.004, "rel_floor": 0.01, "nonfinite": 0}, "stock": {"cosine": 1, "max_abs": 0.1, "mean_abs": 0.01, "max_rel": 1, "mean_rel": 0.004, "rel_floor": 0.01, "nonfinite": 0}},
  {"name": "model.layers.1", "injected": {"cosine": 1, "max_abs": 0.1, "mean_abs": 0.01, "max_rel": 1, "mean_rel": 0.005, "rel_floor": 0.01, "nonfinite": 0}, "stock": {"cosine": 1, "max_abs": 0.1, "mean_abs": 0.01, "max_rel": 1, "mean_rel": 0.005, "rel_floor": 0.01, "nonfinite": 0}}],
 "generation": {"prompt_tokens": 8, "new_tokens": 8, "injected": {"prefix": 1, "positions": 1, "tokens": 8}, "stock": {"prefix": 1, "positions": 1, "tokens": 8}, "injected_vs_stock": {"prefix": 1, "positions": 1, "tokens": 8}},
 "latency": {"measured": false, "reason": "the kernels ran under the Triton interpreter"}}
`

func run(args []string) int {
	if len(args) >= 2 && args[0] == "-c" { // the probe
		probe := map[string]any{"version": "3.11.0", "torch": "2.11.0", "transformers": "5.17.0", "triton": "3.6.0",
			"kernels": "", "safetensors": "0.6.0", "cuda": false, "xpu": false, "device": ""}
		if g := os.Getenv("XPUINJECT_FAKE_PYTHON_GPUS"); g != "" {
			var mem []int64
			for _, f := range strings.Split(g, ",") {
				n, _ := strconv.ParseInt(f, 10, 64)
				mem = append(mem, n)
			}
			probe["cuda"], probe["device"], probe["gpus"] = true, "Fake GPU", mem
		}
		b, _ := json.Marshal(probe)
		fmt.Println(string(b))
		return 0
	}
	if p := os.Getenv("XPUINJECT_FAKE_PYTHON_ARGS"); p != "" {
		if f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintln(f, strings.Join(args, " "))
			f.Close()
		}
	}
	if c := os.Getenv("XPUINJECT_FAKE_PYTHON_FAIL"); c != "" {
		fmt.Fprintln(os.Stderr, "xpuinject-eval: exit-code: "+c)
		fmt.Fprintln(os.Stderr, "xpuinject-eval: error: rank 1 of 2: model.layers.1.mlp: fake failure")
		return 1
	}
	var out string
	for i, a := range args {
		if a == "--out" && i+1 < len(args) {
			out = args[i+1]
		}
	}
	if p := os.Getenv("XPUINJECT_FAKE_PYTHON_PIDS"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			fmt.Fprintln(f, os.Getpid())
			f.Close()
		}
	}
	fmt.Fprintln(os.Stderr, "xpuinject-eval: fake driver running")
	if d, err := time.ParseDuration(os.Getenv("XPUINJECT_FAKE_PYTHON_SLEEP")); err == nil {
		time.Sleep(d)
	}
	if out == "" {
		fmt.Fprintln(os.Stderr, "xpuinject-eval: error: no --out")
		return 2
	}
	if err := os.WriteFile(out+".tmp", []byte(fakeEvalJSON), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "xpuinject-eval: error:", err)
		return 5
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		fmt.Fprintln(os.Stderr, "xpuinject-eval: error:", err)
		return 5
	}
	return 0
}
