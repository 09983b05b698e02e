package kernels

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/models"
)

// GPUDir is the folder of the kernel package that holds one file per GPU model,
// gpus/<name>.json: the vendor routes the benchmark measured there (benchmarks/routes.py
// writes them), the targets it missed but kept, and tuned launch configs
// (benchmarks/tune.py --write-tuned). The planner reads the routes; the layers read the
// tuned configs of the GPU they run on (gpus.py). A GPU without a file plans with no vendor
// routes and its kernels autotune on first use.
const GPUDir = "gpus"

var gpuName = regexp.MustCompile(`^[a-z0-9][-a-z0-9]*$`)

// GPU is one gpus/<name>.json.
type GPU struct {
	Name string `json:"gpu"`
	// Devices are the names torch gives the GPU (torch.cuda.get_device_name): how the
	// layers find the file of the device they run on.
	Devices []string `json:"devices"`
	About   string   `json:"about,omitempty"`
	Routes  []Route  `json:"routes"`
	Kept    []Kept   `json:"kept"`
	Tuned   []Tuned  `json:"tuned"`
	// File is the file's path inside the package ("gpus/h200.json"); "" when the GPU has none.
	File string `json:"-"`
}

// Measurement is one benchmarked shape: Ratio is the vendor's time over ours (below 1:
// the vendor is faster).
type Measurement struct {
	Shape string  `json:"shape"` // "M=2048", "S=2048", "B=1 L=8192"
	Ratio float64 `json:"ratio"`
}

// Stamp says where a measurement comes from.
type Stamp struct {
	Date    string `json:"date"`
	Command string `json:"command"`
	Source  string `json:"source"` // the result file that holds the rows
}

// Route sends one sub-operation of a replaced layer to the vendor path (cuBLAS, SDPA): the
// layer stays replaced (its fusions still pay), that operation does not.
type Route struct {
	// Kernel is the registry kernel whose sub-operation this is ("gemm",
	// "attention-prefill", "attention-decode"); a layer replaced by a kernel that uses it
	// gets the route too (attention's projections run on gemm).
	Kernel string `json:"kernel"`
	// Op is what the plan routes and the layer looks up: a GEMM name (qkv_proj, o_proj,
	// gate_up_proj, down_proj), "attention-prefill" or "attention-decode".
	Op string `json:"op"`
	// GEMM, K and N match a GEMM route: the layer runs a GEMM of that name and shape.
	GEMM string `json:"gemm,omitempty"`
	K    int64  `json:"k,omitempty"`
	N    int64  `json:"n,omitempty"`
	// Tokens bounds a GEMM route to calls of one token class (TokensDecode, TokensShort or
	// TokensPrefill); "" is every call. A GEMM routed for two classes has a route for each.
	Tokens string `json:"tokens,omitempty"`
	// HeadDims match an attention route: the layer's head_dim is one of them.
	HeadDims []int64 `json:"head_dims,omitempty"`
	// KeepLayer keeps the whole layer on the stock path instead of routing one operation.
	KeepLayer bool          `json:"keep_layer,omitempty"`
	Vendor    string        `json:"vendor"`          // the vendor path measured ("cuBLAS")
	Model     string        `json:"model,omitempty"` // the model whose shape was benchmarked
	Measured  []Measurement `json:"measured"`
	Stamp
}

// Kept is an operation that missed its benchmark target and is still not routed, because
// the paths a model can run instead are slower: the plan says so.
type Kept struct {
	Kernel   string        `json:"kernel"`
	Op       string        `json:"op"`
	GEMM     string        `json:"gemm,omitempty"`
	K        int64         `json:"k,omitempty"`
	N        int64         `json:"n,omitempty"`
	HeadDims []int64       `json:"head_dims,omitempty"`
	Epilogue string        `json:"epilogue,omitempty"`
	Vendor   string        `json:"vendor"`
	Model    string        `json:"model,omitempty"`
	Measured []Measurement `json:"measured"` // against the paths a model can run
	Target   string        `json:"target"`   // the benchmark's target, in its words
	Missed   []Measurement `json:"missed"`   // the target ratios it missed
	Stamp
}

// Tuned is a launch config the benchmark chose for one problem class: the layers launch it
// directly instead of autotuning (gpus.py).
type Tuned struct {
	// Kernel is the tuned launcher: "gemm", "gemv" (decode-sized GEMMs), "attention.prefill",
	// "attention.decode", "moe.decode" or "moe.prefill".
	Kernel string `json:"kernel"`
	// Key selects the calls it applies to (gemm: epilogue, m_bucket, k, n; attention: the
	// autotuner's key, lowercase); a key it does not name matches any value.
	Key map[string]any `json:"key"`
	// Config holds the launch constants, each a positive integer.
	Config map[string]int `json:"config"`
	// Measured is what the benchmark timed, as it wrote it (Times reads it).
	Measured json.RawMessage `json:"measured,omitempty"`
	Stamp
}

// TunedTimes are a tuned entry's measured times in µs, nil where not timed: the tuned config's,
// the class's heuristic config's and the autotuner's pick's.
type TunedTimes struct {
	US          *float64 `json:"us"`
	HeuristicUS *float64 `json:"heuristic_us"`
	AutotuneUS  *float64 `json:"autotune_us"`
}

// tunedMeasured is a measured block as the benchmarks write it: benchmarks/tune.py times in µs
// (the tuned config's and, where it timed them, the heuristic config's and the autotuner's
// pick's); benchmarks/bench_moe.py the case, times in ms (the tuned config's and that of the
// config the launcher took by itself, "default") and GB/s.
type tunedMeasured struct {
	US          *float64 `json:"us"`
	HeuristicUS *float64 `json:"heuristic_us"`
	AutotuneUS  *float64 `json:"autotune_us"`
	Shape       string   `json:"shape"`
	MS          *float64 `json:"ms"`
	DefaultMS   *float64 `json:"default_ms"`
	GBps        *float64 `json:"GBps"`
}

// Times reads the entry's measured block. The MoE launchers never autotune: their "default"
// config, the heuristic's where no tuned entry covered the case yet, is HeuristicUS.
func (t *Tuned) Times() (TunedTimes, error) {
	var m tunedMeasured
	if len(t.Measured) > 0 {
		dec := json.NewDecoder(bytes.NewReader(t.Measured))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return TunedTimes{}, fmt.Errorf("measured: %s", models.JSONError(err))
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"us", m.US}, {"heuristic_us", m.HeuristicUS}, {"autotune_us", m.AutotuneUS}, {"ms", m.MS},
		{"default_ms", m.DefaultMS}, {"GBps", m.GBps}} {
		if f.v != nil && !(*f.v > 0) {
			return TunedTimes{}, fmt.Errorf("measured %s %v: want a positive number", f.name, *f.v)
		}
	}
	switch {
	case m.US != nil && m.MS != nil:
		return TunedTimes{}, fmt.Errorf("measured: both us and ms (want µs as benchmarks/tune.py writes, " +
			"or ms as benchmarks/bench_moe.py does)")
	case m.US == nil && (m.HeuristicUS != nil || m.AutotuneUS != nil):
		return TunedTimes{}, fmt.Errorf("measured: heuristic_us or autotune_us without us, the tuned config's time")
	case m.MS == nil && m.DefaultMS != nil:
		return TunedTimes{}, fmt.Errorf("measured: default_ms without ms, the tuned config's time")
	case m.MS != nil:
		return TunedTimes{US: msToUS(m.MS), HeuristicUS: msToUS(m.DefaultMS)}, nil
	}
	return TunedTimes{US: m.US, HeuristicUS: m.HeuristicUS, AutotuneUS: m.AutotuneUS}, nil
}

func msToUS(ms *float64) *float64 {
	if ms == nil {
		return nil
	}
	us := *ms * 1e3
	return &us
}

// Slower reports whether the tuned config measured slower than the heuristic config and than
// the autotuner's pick (false where either was not timed), by more than float rounding: a
// sweep times both among its candidates, so its best is never slower.
func (tt TunedTimes) Slower() (heuristic, autotune bool) {
	slower := func(other *float64) bool { return tt.US != nil && other != nil && *tt.US > *other*(1+1e-9) }
	return slower(tt.HeuristicUS), slower(tt.AutotuneUS)
}

// TunedConfigKeys are the launch constants each tuned launcher takes (gemm.py, attention.py,
// moe.py).
var TunedConfigKeys = map[string][]string{
	"gemm":              {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps", "num_stages"},
	"attention.prefill": {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"},
	"attention.decode":  {"BLOCK_N", "num_warps", "num_stages"},
	"gemv":              {"BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages"},
	"moe.decode": {"BLOCK_N", "BLOCK_K", "SPLIT_K", "DOWN_BLOCK_N", "DOWN_BLOCK_K", "DOWN_SPLIT_K",
		"num_warps", "num_stages"},
	"moe.prefill": {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"},
}

// TunedConfigFlags are switches (0 or 1, 0 where absent) a tuned launcher's config may add to
// its TunedConfigKeys (gemv.py's CONFIG_FLAGS, moe.py's DECODE_FLAGS).
var TunedConfigFlags = map[string][]string{
	"gemv":       {"EW", "PTR"},
	"moe.decode": {"EW", "DOWN_EW"},
}

// TunedKeyFields are the problem fields each tuned launcher looks its config up by, in the
// order it passes them (gemm.py, gemv.py, attention.py, moe.py): a key naming another field
// would never match.
var TunedKeyFields = map[string][]string{
	"gemm":              {"epilogue", "m_bucket", "k", "n"},
	"gemv":              {"epilogue", "m_bucket", "k", "n", "head_dim"},
	"attention.prefill": {"seq_q_bucket", "seq_k_bucket", "head_dim", "is_causal", "mask_kind"},
	"attention.decode":  {"split_bucket", "head_dim", "block_g", "mask_kind", "single"},
	"moe.decode":        {"hidden", "inter", "experts", "top_k", "tokens"},
	"moe.prefill":       {"hidden", "inter", "experts", "top_k", "tokens"},
}

// Token-count classes of a GEMM route: the layer picks the route per call from M, the
// number of tokens (rows) of the GEMM's input.
const (
	TokensDecode  = "decode"  // M <= DecodeMaxM
	TokensShort   = "short"   // DecodeMaxM < M <= ShortMaxM
	TokensPrefill = "prefill" // M > ShortMaxM
)

// DecodeMaxM and ShortMaxM bound the decode and short classes (contract.json's
// decode_max_tokens and short_max_tokens).
var (
	DecodeMaxM = contract.DecodeMaxTokens
	ShortMaxM  = contract.ShortMaxTokens
)

// TokenBounds are the token counts a route covers, 0 leaving a side open.
func (rt *Route) TokenBounds() (minTokens, maxTokens int64) {
	switch rt.Tokens {
	case TokensDecode:
		return 0, DecodeMaxM
	case TokensShort:
		return DecodeMaxM + 1, ShortMaxM
	case TokensPrefill:
		return ShortMaxM + 1, 0
	}
	return 0, 0
}

// When describes the shapes a route covers ("down_proj K=8192 N=2048 at decode (M <= 16)").
func (rt *Route) When() string {
	switch {
	case rt.GEMM != "":
		w := fmt.Sprintf("%s K=%d N=%d", rt.GEMM, rt.K, rt.N)
		switch rt.Tokens {
		case TokensDecode:
			w += fmt.Sprintf(" at decode (M <= %d)", DecodeMaxM)
		case TokensShort:
			w += fmt.Sprintf(" at short prefill (%d < M <= %d)", DecodeMaxM, ShortMaxM)
		case TokensPrefill:
			w += fmt.Sprintf(" at prefill (M > %d)", ShortMaxM)
		}
		return w
	case rt.Op == "attention-prefill":
		return "causal prefill at head_dim " + joinInts(rt.HeadDims)
	case rt.Op == "attention-decode":
		return "decode (one query token per sequence) at head_dim " + joinInts(rt.HeadDims)
	}
	return rt.Op
}

// Match reports whether the route applies to s.
func (rt *Route) Match(s *Subject) bool {
	return matchOp(s, rt.GEMM, rt.K, rt.N, "", rt.HeadDims)
}

// Match reports whether the kept entry applies to s.
func (k *Kept) Match(s *Subject) bool {
	return matchOp(s, k.GEMM, k.K, k.N, k.Epilogue, k.HeadDims)
}

func matchOp(s *Subject, gemm string, k, n int64, epilogue string, headDims []int64) bool {
	if gemm != "" {
		return slices.ContainsFunc(s.GEMMs, func(g GEMM) bool {
			return g.Name == gemm && g.K == k && g.N == n && (epilogue == "" || g.Epilogue == epilogue)
		})
	}
	return s.Layer.Kind == models.KindAttention && slices.Contains(headDims, s.Layer.Dims["head_dim"])
}

// Reason is the route's part of a plan reason: where it applies, the vendor, every measured
// ratio and the file they are in.
func (rt *Route) Reason(file string) string {
	return fmt.Sprintf("vendor path faster for %s (%s; our speed %s; %s)", rt.When(), rt.Vendor, Ratios(rt.Measured), file)
}

// Note is the kept entry's note for a plan reason.
func (k *Kept) Note(file string) string {
	what := k.Op
	if k.GEMM != "" {
		what = fmt.Sprintf("%s K=%d N=%d", k.GEMM, k.K, k.N)
	}
	return fmt.Sprintf("%s stays on our kernel: %s is slower (our speed %s) though the %s target is missed (%s; %s)",
		what, k.Vendor, Ratios(k.Measured), strings.TrimPrefix(k.Target, ">="), Ratios(k.Missed), file)
}

// Ratios renders measurements as "0.77x at M=1, 0.75x at M=64" (our speed over the vendor's).
func Ratios(ms []Measurement) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%.2fx at %s", m.Ratio, m.Shape)
	}
	return strings.Join(parts, ", ")
}

func joinInts(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	if n := len(s); n > 1 {
		return strings.Join(s[:n-1], ", ") + " and " + s[n-1]
	}
	return strings.Join(s, "")
}

// GPUs lists the GPUs the package has data for, sorted.
func GPUs() []string {
	ents, err := fs.ReadDir(Sources, SourceDir+"/"+GPUDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// GPUOfDevice names the GPU whose data file lists device (the name torch gives it, e.g. "NVIDIA
// H100 80GB HBM3"), "" when no file does.
func GPUOfDevice(device string) string {
	if device == "" {
		return ""
	}
	for _, name := range GPUs() {
		if g, err := LoadGPU(name); err == nil && slices.Contains(g.Devices, device) {
			return name
		}
	}
	return ""
}

// DefaultGPU is the GPU a plan targets when none is named (contract.json's default_gpu).
func DefaultGPU() string { return contract.DefaultGPU }

// LoadGPU reads the embedded data of a GPU ("" is DefaultGPU). A GPU without a file is not
// an error: its GPU has no routes, no kept notes and no tuned configs (File ""), so a plan
// for it keeps every kernel and the kernels autotune on first use.
func LoadGPU(name string) (*GPU, error) {
	if name == "" {
		name = DefaultGPU()
	}
	if !gpuName.MatchString(name) {
		return nil, fmt.Errorf("kernels: GPU name %q: want lowercase letters, digits and dashes (known: %s)", name, strings.Join(GPUs(), ", "))
	}
	file := GPUDir + "/" + name + ".json"
	b, err := fs.ReadFile(Sources, SourceDir+"/"+file)
	if err != nil {
		return &GPU{Name: name}, nil
	}
	return ParseGPU(b, file)
}

// ParseGPU reads and checks one gpus/<name>.json (file is its path, for errors and
// reasons): every route names a kernel of Default, its op and exactly one kind of match,
// every measurement a shape and a positive ratio, every tuned config known constants, key
// fields and a measured block that reads (Tuned.Times).
func ParseGPU(b []byte, file string) (*GPU, error) {
	var g GPU
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("kernels: %s: %s", file, models.JSONError(err))
	}
	g.File = file
	bad := func(format string, a ...any) (*GPU, error) {
		return nil, fmt.Errorf("kernels: %s: "+format, append([]any{file}, a...)...)
	}
	if want := strings.TrimSuffix(path.Base(file), ".json"); g.Name != want {
		return bad("gpu %q, but the file is named for %q", g.Name, want)
	}
	if len(g.Devices) == 0 {
		return bad("no devices (the names torch gives this GPU)")
	}
	names := defaultNames()
	for i, rt := range g.Routes {
		where := fmt.Sprintf("route %d (%s)", i, rt.Op)
		switch {
		case !slices.Contains(names, rt.Kernel):
			return bad("%s: kernel %q is not in the registry", where, rt.Kernel)
		case rt.Op == "":
			return bad("%s: no op", where)
		case (rt.GEMM != "") == (len(rt.HeadDims) > 0):
			return bad("%s: wants either gemm with k and n, or head_dims", where)
		case rt.GEMM != "" && (rt.K < 1 || rt.N < 1):
			return bad("%s: gemm %s without a positive k and n", where, rt.GEMM)
		case rt.Tokens != "" && (!slices.Contains([]string{TokensDecode, TokensShort, TokensPrefill}, rt.Tokens) || rt.GEMM == ""):
			return bad("%s: tokens %q: want %q, %q or %q on a gemm route", where, rt.Tokens, TokensDecode, TokensShort,
				TokensPrefill)
		}
		if err := checkMeasured(rt.Measured, rt.Stamp); err != nil {
			return bad("%s: %v", where, err)
		}
	}
	for i, k := range g.Kept {
		where := fmt.Sprintf("kept %d (%s)", i, k.Op)
		if !slices.Contains(names, k.Kernel) || (k.GEMM != "") == (len(k.HeadDims) > 0) {
			return bad("%s: wants a registry kernel and either gemm with k and n, or head_dims", where)
		}
		if err := checkMeasured(append(slices.Clone(k.Measured), k.Missed...), k.Stamp); err != nil {
			return bad("%s: %v", where, err)
		}
	}
	for i, t := range g.Tuned {
		allowed, ok := TunedConfigKeys[t.Kernel]
		if !ok {
			return bad("tuned %d: kernel %q (tuned launchers: %s)", i, t.Kernel,
				strings.Join(slices.Sorted(maps.Keys(TunedConfigKeys)), ", "))
		}
		for _, k := range allowed {
			if t.Config[k] < 1 {
				return bad("tuned %d (%s): config %s missing or not a positive integer", i, t.Kernel, k)
			}
		}
		flags := TunedConfigFlags[t.Kernel]
		for _, k := range slices.Sorted(maps.Keys(t.Config)) {
			if slices.Contains(allowed, k) {
				continue
			}
			if !slices.Contains(flags, k) {
				return bad("tuned %d (%s): config has keys besides %s", i, t.Kernel,
					strings.Join(append(slices.Clone(allowed), flags...), ", "))
			}
			if v := t.Config[k]; v != 0 && v != 1 {
				return bad("tuned %d (%s): config %s=%d: want 0 or 1", i, t.Kernel, k, v)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(t.Key)) {
			if !slices.Contains(TunedKeyFields[t.Kernel], k) {
				return bad("tuned %d (%s): key %q is not a field the launcher looks up (%s)", i, t.Kernel, k,
					strings.Join(TunedKeyFields[t.Kernel], ", "))
			}
		}
		if _, err := t.Times(); err != nil {
			return bad("tuned %d (%s): %v", i, t.Kernel, err)
		}
	}
	return &g, nil
}

func checkMeasured(ms []Measurement, st Stamp) error {
	if len(ms) == 0 {
		return fmt.Errorf("no measurements")
	}
	for _, m := range ms {
		if m.Shape == "" || !(m.Ratio > 0) {
			return fmt.Errorf("measurement %+v: want a shape and a positive ratio", m)
		}
	}
	if st.Date == "" || st.Command == "" || st.Source == "" {
		return fmt.Errorf("date, command and source are required")
	}
	return nil
}
