package kernels

import (
	"fmt"
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
	g, err = LoadGPU("b200")
	if err != nil || g.Name != "b200" || g.File != "" || len(g.Routes)+len(g.Kept)+len(g.Tuned) != 0 {
		t.Errorf("GPU without data: %+v %v", g, err)
	}
	if _, err := LoadGPU("H200"); err == nil || !strings.Contains(err.Error(), `GPU name "H200"`) {
		t.Errorf("bad name: %v", err)
	}
}

// A device finds the file that lists torch's name for it, and only that one.
func TestGPUOfDevice(t *testing.T) {
	for dev, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200",
		"NVIDIA A100-SXM4-80GB": "", "NVIDIA H100": "", "": "",
	} {
		if got := GPUOfDevice(dev); got != want {
			t.Errorf("GPUOfDevice(%q) = %q, want %q", dev, got, want)
		}
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
		{tuned(`{"kernel": "moe.prefill", "key": {}, "config": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "EW": 1}, ` + stamp + `}`),
			"keys besides BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages"},
		{tuned(`{"kernel": "moe.decode", "key": {}, "config": {"BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "DOWN_BLOCK_N": 64, "DOWN_BLOCK_K": 128, "DOWN_SPLIT_K": 1, "num_warps": 4, "num_stages": 3, "DOWN_EW": 2}, ` + stamp + `}`),
			"tuned 0 (moe.decode): config DOWN_EW=2: want 0 or 1"},
		{tuned(`{"kernel": "gemv", "key": {}, "config": {"BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 3, "PTR": 2}, ` + stamp + `}`),
			"tuned 0 (gemv): config PTR=2: want 0 or 1"},
		{tuned(`{"kernel": "attention.decode", "key": {"seq_q_bucket": 1}, "config": {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2}, ` + stamp + `}`),
			`tuned 0 (attention.decode): key "seq_q_bucket" is not a field the launcher looks up (split_bucket, head_dim,`},
		{tuned(tunedGEMM(`"fast"`)), `gpus/x.json: tuned 0 (gemm): measured: expected a JSON object, got a string`},
		{tuned(tunedGEMM(`{"us": "3"}`)), `tuned 0 (gemm): measured: "us": expected a number, got a string`},
		{tuned(tunedGEMM(`{"us": 3}`) + `, ` + tunedGEMM(`{"us": 3, "autotune_ms": 4}`)), `tuned 1 (gemm): measured: unknown field "autotune_ms"`},
		{tuned(tunedGEMM(`{"us": 0, "heuristic_us": 4}`)), `tuned 0 (gemm): measured us 0: want a positive number`},
		{tuned(tunedGEMM(`{"us": 3, "autotune_us": -1}`)), `measured autotune_us -1: want a positive number`},
		{tuned(tunedGEMM(`{"heuristic_us": 4, "autotune_us": 4}`)), `tuned 0 (gemm): measured: heuristic_us or autotune_us without us`},
		{tuned(tunedGEMM(`{"us": 3, "ms": 0.003}`)), `measured: both us and ms`},
		{tuned(tunedGEMM(`{"shape": "x", "default_ms": 0.04}`)), `measured: default_ms without ms`},
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
	// the measured blocks the benchmarks write: tune.py's, bench_moe.py's (default_ms null when
	// the default config failed) and one with only the case
	for measured, want := range map[string]TunedTimes{
		`{"us": 3.5, "heuristic_us": 4, "autotune_us": 7}`:                        {ptr(3.5), ptr(4), ptr(7)},
		`{"us": 3.5, "heuristic_us": 4}`:                                          {ptr(3.5), ptr(4), nil},
		`{"shape": "q tokens 1", "ms": 0.04, "default_ms": 0.05, "GBps": 1726.9}`: {ptr(40), ptr(50), nil},
		`{"shape": "q tokens 1", "ms": 0.04, "default_ms": null, "GBps": 1726.9}`: {ptr(40), nil, nil},
		`{"shape": "llama-3.2-1b o_proj"}`:                                        {},
		`null`:                                                                    {},
	} {
		g, err := ParseGPU([]byte(tuned(tunedGEMM(measured))), "gpus/x.json")
		if err != nil {
			t.Errorf("%s: %v", measured, err)
			continue
		}
		if got, err := g.Tuned[0].Times(); err != nil || fmt.Sprint(deref(got)) != fmt.Sprint(deref(want)) {
			t.Errorf("%s: times %v %v, want %v", measured, deref(got), err, deref(want))
		}
	}
	// the MoE launchers' entries, as benchmarks/bench_moe.py --write-tuned writes them
	moe := tuned(`{"kernel": "moe.decode", "key": {"hidden": 2048, "inter": 768, "experts": 128, "top_k": 8, "tokens": 1},
		"config": {"BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "DOWN_BLOCK_N": 64, "DOWN_BLOCK_K": 128, "DOWN_SPLIT_K": 1,
		"num_warps": 4, "num_stages": 3, "EW": 1, "DOWN_EW": 0}, ` + stamp + `}, {"kernel": "moe.prefill", "key": {"tokens": 2048},
		"config": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}, ` + stamp + `}`)
	if g, err := ParseGPU([]byte(moe), "gpus/x.json"); err != nil || len(g.Tuned) != 2 || g.Tuned[1].Config["BLOCK_M"] != 128 ||
		g.Tuned[0].Config["EW"] != 1 {
		t.Errorf("valid MoE tuned entries: %+v %v", g, err)
	}
	// a GEMV class kept on pointer loads where descriptors are the default (gemv.py's PTR flag)
	ptrGEMV := tuned(`{"kernel": "gemv", "key": {"epilogue": "none", "m_bucket": 8, "k": 4096, "n": 6144},
		"config": {"BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 1, "num_warps": 4, "num_stages": 3, "PTR": 1}, ` + stamp + `}`)
	if g, err := ParseGPU([]byte(ptrGEMV), "gpus/x.json"); err != nil || g.Tuned[0].Config["PTR"] != 1 {
		t.Errorf("valid gemv entry with PTR: %+v %v", g, err)
	}
}

// tunedGEMM is a valid gemm entry with the given measured block.
func tunedGEMM(measured string) string {
	return `{"kernel": "gemm", "key": {"epilogue": "none", "m_bucket": 16, "k": 4096, "n": 4096},
		"config": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
		"measured": ` + measured + `, "date": "d", "command": "c", "source": "s"}`
}

func ptr(v float64) *float64 { return &v }

// deref shows times by value, "-" for nil.
func deref(tt TunedTimes) []string {
	var out []string
	for _, v := range []*float64{tt.US, tt.HeuristicUS, tt.AutotuneUS} {
		if v == nil {
			out = append(out, "-")
		} else {
			out = append(out, fmt.Sprint(*v))
		}
	}
	return out
}

// tunedSlower lists the tuned entries of g that measured slower than the heuristic config or
// the autotuner's pick, with both times.
func tunedSlower(t *testing.T, g *GPU) (slower []string, vsAutotune int) {
	t.Helper()
	for i, e := range g.Tuned {
		tt, err := e.Times()
		if err != nil {
			t.Fatalf("%s: tuned %d: %v", g.File, i, err)
		}
		if tt.AutotuneUS != nil {
			vsAutotune++
		}
		heuristic, autotune := tt.Slower()
		if heuristic {
			slower = append(slower, fmt.Sprintf("tuned %d (%s %v): %.3f µs, heuristic %.3f µs", i, e.Kernel, e.Key,
				*tt.US, *tt.HeuristicUS))
		}
		if autotune {
			slower = append(slower, fmt.Sprintf("tuned %d (%s %v): %.3f µs, autotune %.3f µs", i, e.Kernel, e.Key,
				*tt.US, *tt.AutotuneUS))
		}
	}
	return slower, vsAutotune
}

// No shipped tuned config measured slower than the autotuner's pick or the heuristic config of
// its class: a launch it covers would be faster autotuning.
func TestShippedTunedNotSlower(t *testing.T) {
	compared := 0
	for _, n := range GPUs() {
		g, err := LoadGPU(n)
		if err != nil {
			t.Fatal(err)
		}
		slower, vs := tunedSlower(t, g)
		for _, s := range slower {
			t.Errorf("%s: %s", g.File, s)
		}
		compared += vs
	}
	if compared == 0 {
		t.Fatal("no shipped tuned entry has an autotune_us to compare with")
	}
}

// The check behind TestShippedTunedNotSlower fails on a slower entry, and only on one.
func TestTunedSlower(t *testing.T) {
	for _, c := range []struct {
		measured   string
		want       string
		vsAutotune int
	}{
		{`{"us": 3, "heuristic_us": 4, "autotune_us": 3}`, "", 1},
		{`{"us": 3, "heuristic_us": 3.0000000000001, "autotune_us": 2.9999999999999}`, "", 1},
		{`{"us": 3.5, "heuristic_us": 4, "autotune_us": 3.4}`, "tuned 0 (gemm map[epilogue:none k:4096 m_bucket:16 n:4096]): " +
			"3.500 µs, autotune 3.400 µs", 1},
		{`{"us": 3.5, "heuristic_us": 3.4}`, "3.500 µs, heuristic 3.400 µs", 0},
		{`{"shape": "x", "ms": 0.05, "default_ms": 0.04}`, "50.000 µs, heuristic 40.000 µs", 0},
		{`{"shape": "x"}`, "", 0},
	} {
		g, err := ParseGPU([]byte(`{"gpu": "x", "devices": ["X"], "tuned": [`+tunedGEMM(c.measured)+`]}`), "gpus/x.json")
		if err != nil {
			t.Fatal(err)
		}
		slower, vs := tunedSlower(t, g)
		if got := strings.Join(slower, "; "); (c.want == "") != (got == "") || !strings.Contains(got, c.want) || vs != c.vsAutotune {
			t.Errorf("%s: slower %q (%d vs autotune), want %q (%d)", c.measured, got, vs, c.want, c.vsAutotune)
		}
	}
}

func TestTunedKeyFields(t *testing.T) {
	for k := range TunedConfigKeys {
		if len(TunedKeyFields[k]) == 0 {
			t.Errorf("tuned launcher %s has no key fields", k)
		}
	}
	if len(TunedKeyFields) != len(TunedConfigKeys) {
		t.Errorf("key fields for %d launchers, config keys for %d", len(TunedKeyFields), len(TunedConfigKeys))
	}
}
