package kernels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every shipped GPU file parses, names the file's GPU and cites result files that are in
// the repository.
func TestShippedGPUData(t *testing.T) {
	names := GPUs()
	if len(names) == 0 || names[0] == "" {
		t.Fatalf("no GPU data embedded (%v)", names)
	}
	for _, n := range names {
		g, err := LoadGPU(n)
		if err != nil {
			t.Fatal(err)
		}
		if g.File != GPUDir+"/"+n+".json" || len(g.Devices) == 0 {
			t.Errorf("%s: file %q devices %v", n, g.File, g.Devices)
		}
		for _, st := range append(stamps(g.Routes), keptStamps(g.Kept)...) {
			if _, err := os.Stat(filepath.Join("..", st.Source)); err != nil {
				t.Errorf("%s: source %s: %v", n, st.Source, err)
			}
		}
	}
	g, err := LoadGPU("")
	if err != nil || g.Name != DefaultGPU() || len(g.Routes) == 0 {
		t.Fatalf("default GPU %q: %+v %v", DefaultGPU(), g, err)
	}
	g, err = LoadGPU("h100")
	if err != nil || g.Name != "h100" || g.File != "" || len(g.Routes)+len(g.Kept)+len(g.Tuned) != 0 {
		t.Errorf("GPU without data: %+v %v", g, err)
	}
	if _, err := LoadGPU("H200"); err == nil || !strings.Contains(err.Error(), `GPU name "H200"`) {
		t.Errorf("bad name: %v", err)
	}
}

func stamps(rs []Route) []Stamp {
	var out []Stamp
	for _, r := range rs {
		out = append(out, r.Stamp)
	}
	return out
}

func keptStamps(ks []Kept) []Stamp {
	var out []Stamp
	for _, k := range ks {
		out = append(out, k.Stamp)
	}
	return out
}

func TestParseGPURejects(t *testing.T) {
	const stamp = `"date": "d", "command": "c", "source": "s"`
	route := func(body string) string {
		return `{"gpu": "x", "devices": ["X"], "routes": [{` + body + `, ` + stamp + `}], "kept": [], "tuned": []}`
	}
	tuned := func(body string) string {
		return `{"gpu": "x", "devices": ["X"], "routes": [], "kept": [], "tuned": [` + body + `]}`
	}
	for _, c := range []struct{ doc, want string }{
		{`{`, "unexpected EOF"},
		{`{"gpu": "y", "devices": ["X"]}`, `gpu "y", but the file is named for "x"`},
		{`{"gpu": "x", "devices": []}`, "no devices"},
		{`{"gpu": "x", "devices": ["X"], "extra": 1}`, "extra"},
		{route(`"kernel": "flash", "op": "o", "gemm": "o", "k": 16, "n": 16, "measured": [{"shape": "M=1", "ratio": 0.5}]`), `kernel "flash" is not in the registry`},
		{route(`"kernel": "gemm", "op": "o", "measured": [{"shape": "M=1", "ratio": 0.5}]`), "either gemm with k and n, or head_dims"},
		{route(`"kernel": "gemm", "op": "o", "gemm": "o", "k": 16, "n": 16, "head_dims": [64], "measured": [{"shape": "M=1", "ratio": 0.5}]`), "either gemm"},
		{route(`"kernel": "gemm", "op": "o", "gemm": "o", "k": 0, "n": 16, "measured": [{"shape": "M=1", "ratio": 0.5}]`), "positive k and n"},
		{route(`"kernel": "gemm", "op": "o", "gemm": "o", "k": 16, "n": 16, "tokens": "medium", "measured": [{"shape": "M=1", "ratio": 0.5}]`), `tokens "medium"`},
		{route(`"kernel": "attention-decode", "op": "attention-decode", "head_dims": [64], "tokens": "decode", "measured": [{"shape": "B=1", "ratio": 0.5}]`), `tokens "decode"`},
		{route(`"kernel": "gemm", "op": "o", "gemm": "o", "k": 16, "n": 16, "measured": []`), "no measurements"},
		{route(`"kernel": "gemm", "op": "o", "gemm": "o", "k": 16, "n": 16, "measured": [{"shape": "M=1", "ratio": 0}]`), "positive ratio"},
		{tuned(`{"kernel": "rmsnorm", "key": {}, "config": {}, ` + stamp + `}`),
			`kernel "rmsnorm" (tuned launchers: attention.decode, attention.prefill, gemm, gemv, moe.decode, moe.prefill)`},
		{tuned(`{"kernel": "moe.prefill", "key": {}, "config": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4}, ` + stamp + `}`),
			"config num_stages missing"},
		{tuned(`{"kernel": "attention.decode", "key": {}, "config": {"BLOCK_N": 64, "num_warps": 4}, ` + stamp + `}`), "config num_stages missing"},
		{tuned(`{"kernel": "attention.decode", "key": {}, "config": {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "BLOCK_M": 1}, ` + stamp + `}`), "keys besides"},
	} {
		if _, err := ParseGPU([]byte(c.doc), "gpus/x.json"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n err %v, want %q", c.doc, err, c.want)
		}
	}
	ok := tuned(`{"kernel": "gemm", "key": {"epilogue": "none", "m_bucket": 16, "k": 4096, "n": 4096},
		"config": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}, ` + stamp + `}`)
	if g, err := ParseGPU([]byte(ok), "gpus/x.json"); err != nil || len(g.Tuned) != 1 || g.Tuned[0].Config["BLOCK_K"] != 256 {
		t.Errorf("valid tuned entry: %+v %v", g, err)
	}
	// the MoE launchers' entries, as benchmarks/bench_moe.py --write-tuned writes them
	moe := tuned(`{"kernel": "moe.decode", "key": {"hidden": 2048, "inter": 768, "experts": 128, "top_k": 8, "tokens": 1},
		"config": {"BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "DOWN_BLOCK_N": 64, "DOWN_BLOCK_K": 128, "DOWN_SPLIT_K": 1,
		"num_warps": 4, "num_stages": 3}, ` + stamp + `}, {"kernel": "moe.prefill", "key": {"tokens": 2048},
		"config": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}, ` + stamp + `}`)
	if g, err := ParseGPU([]byte(moe), "gpus/x.json"); err != nil || len(g.Tuned) != 2 || g.Tuned[1].Config["BLOCK_M"] != 128 {
		t.Errorf("valid MoE tuned entries: %+v %v", g, err)
	}
}
