package harness

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/models"
)

// ReportFiles are the artifacts WriteReport produces, by role: paths relative to the
// eval folder (Run joins them with it).
type ReportFiles struct {
	Markdown string
	Plots    []string
}

// WriteReport renders report.md and the PNG plots for r into the eval folder being
// written.
func WriteReport(r *Result, tx *outdir.Tx) (*ReportFiles, error) {
	files := &ReportFiles{Markdown: "report.md"}
	var plots []string
	if len(r.Layers) > 0 {
		if err := writePNG(tx, "layers.png", LayerErrorChart(r)); err != nil {
			return nil, err
		}
		plots = append(plots, "layers.png")
	}
	if r.Latency.Measured {
		if err := writePNG(tx, "latency.png", LatencyChart(r)); err != nil {
			return nil, err
		}
		plots = append(plots, "latency.png")
	}
	files.Plots = plots
	if err := tx.WriteFile(files.Markdown, Markdown(r, plots)); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	return files, nil
}

func f(n Num) string {
	v := float64(n)
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 0):
		return "inf"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1e4 || math.Abs(v) < 1e-3:
		return fmt.Sprintf("%.3e", v)
	}
	return fmt.Sprintf("%.5g", v)
}

func fp(n *Num) string {
	if n == nil {
		return "—"
	}
	return f(*n)
}

func ratioStr(a, b Num) string {
	if float64(b) == 0 || math.IsNaN(float64(a)) || math.IsNaN(float64(b)) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

func ratioPtr(a, b *Num) string {
	if a == nil || b == nil {
		return "—"
	}
	return ratioStr(*a, *b)
}

// Markdown renders the report.
func Markdown(r *Result, plots []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# xpuinject report: %s (%s)\n\n", filepath.Base(r.Model.Path), r.Model.Arch)
	dev := r.Device.Type
	if r.Device.Name != "" && r.Device.Name != r.Device.Type {
		dev += " (" + r.Device.Name + ")"
	}
	if r.Device.Count > 1 {
		dev += fmt.Sprintf(" ×%d, one pipeline stage each", r.Device.Count)
	}
	if r.Device.Interpret {
		dev += ", Triton interpreter"
	}
	var vers []string
	for _, k := range slices.Sorted(maps.Keys(r.Versions)) {
		vers = append(vers, k+" "+r.Versions[k])
	}
	fmt.Fprintf(&b, "- model: `%s` (%s)\n- device: %s\n- versions: %s\n", r.Model.Path, r.Model.Class, dev, strings.Join(vers, ", "))
	var rep []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(r.Injection.Replaced)) {
		rep = append(rep, fmt.Sprintf("%s×%d", k, r.Injection.Replaced[k]))
		total += r.Injection.Replaced[k]
	}
	// Counted as the plan and pack count: modules, layer bindings, packed tensors.
	kept := fmt.Sprintf("%d modules kept", len(r.Injection.Kept))
	if len(r.Injection.Kept) == 1 {
		kept = "1 module kept"
	}
	loaded := fmt.Sprintf("%d packed tensors loaded, %s", r.Injection.PackedTensors, models.HumanBytes(r.Injection.PackedBytes))
	if n := r.Injection.PackedKeptTensors; n > 0 {
		loaded += fmt.Sprintf(" (of %d packed; %d of kept modules, whose own weights serve)", r.Injection.PackedTensors+n, n)
	}
	fmt.Fprintf(&b, "- injected through `%s` on backend `%s`: %d layer bindings (%s); %s; %s\n",
		r.Injection.Path, r.Injection.Backend, total, strings.Join(rep, ", "), kept, loaded)
	if a := r.Autotune; a != nil {
		data := "no tuned configs for this GPU"
		if len(a.GPUData) > 0 {
			data = "tuned configs from " + strings.Join(a.GPUData, ", ")
		}
		fmt.Fprintf(&b, "- launch configs: %d problem classes from tuned configs (%s), %d from heuristic configs "+
			"derived from their shapes, %d autotuned (%d benchmarked)\n", a.Tuned, data, a.Heuristic, a.Autotuned, a.Benchmarked)
		if line := routesLine(r.Injection.PlanGPU, a.GPUData); line != "" {
			b.WriteString(line)
		}
	}
	b.WriteString("\n")
	writePlacement(&b, r)

	in := r.Accuracy.Input
	b.WriteString("## Accuracy against the fp32 model\n\n")
	if r.Untrained() {
		fmt.Fprintf(&b, "> **Random or untrained weights.** %s\n\n", capitalize(r.UntrainedNote()))
	}
	fmt.Fprintf(&b, "Input: %s. Both %[2]s models are compared with the fp32 model (the oracle); "+
		"the last column is injected error over stock error: near 1× means the kernels cost no accuracy beyond %[2]s itself.\n\n", describeInput(in), r.HalfDtype())
	inj, st := r.Accuracy.Injected, r.Accuracy.Stock
	fmt.Fprintf(&b, "| metric | injected %[1]s | stock %[1]s | injected / stock |\n| --- | --- | --- | --- |\n", r.HalfDtype())
	row := func(name string, a, s Num, ratio bool) {
		rs := "—"
		if ratio {
			rs = ratioStr(a, s)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, f(a), f(s), rs)
	}
	row("logits cosine", inj.Cosine, st.Cosine, false)
	row("max abs error", inj.MaxAbs, st.MaxAbs, true)
	row("mean abs error", inj.MeanAbs, st.MeanAbs, true)
	row(fmt.Sprintf("max rel error (floor %s)", f(inj.RelFloor)), inj.MaxRel, st.MaxRel, true)
	row(fmt.Sprintf("mean rel error (floor %s)", f(inj.RelFloor)), inj.MeanRel, st.MeanRel, true)
	fmt.Fprintf(&b, "| top-1 agreement | %s | %s | — |\n", fp(inj.Top1), fp(st.Top1))
	fmt.Fprintf(&b, "| KL(oracle ‖ model) | %s | %s | %s |\n", fp(inj.KL), fp(st.KL), ratioPtr(inj.KL, st.KL))
	if inj.Perplexity != nil {
		fmt.Fprintf(&b, "| perplexity (oracle %s) | %s | %s | %s |\n", fp(r.Accuracy.OraclePerplexity), fp(inj.Perplexity), fp(st.Perplexity), ratioPtr(inj.Perplexity, st.Perplexity))
	}
	if g := r.Generation; g != nil {
		fmt.Fprintf(&b, "\n### Greedy generation (%d new tokens after each of %d %d-token prompts)\n\n",
			g.NewTokens, max(g.Prompts, 1), g.PromptTokens)
		b.WriteString("| compared | tokens equal | equal before first divergence | divergences: ties / not ties |\n| --- | --- | --- | --- |\n")
		type pair struct {
			name string
			a    Agreement
		}
		pairs := []pair{{"injected vs oracle", g.Injected}, {"stock vs oracle", g.Stock}, {"injected vs stock", g.InjectedVsStock}}
		for _, p := range pairs {
			fmt.Fprintf(&b, "| %s | %s | %s | %d / %d |\n", p.name, pct(p.a.Positions), pct(p.a.Prefix), p.a.Ties, p.a.NonTies)
		}
		if rt := g.Runtime; rt != nil && rt.Stock.VsEager.Tokens == 0 && rt.Injected.VsEager.Tokens == 0 {
			fmt.Fprintf(&b, "\nNot decoded under the package's graph runtime: %s.\n", rt.Reason)
		} else if rt != nil {
			how := "captured device graphs"
			if !rt.Graphs {
				how = "eager steps: " + rt.Reason
			}
			fmt.Fprintf(&b, "\nThe same decoding under the package's graph runtime (%s):\n\n", how)
			b.WriteString("| model | tokens equal to its eager run | before first divergence | divergences: ties / not ties | vs oracle: before first divergence |\n| --- | --- | --- | --- | --- |\n")
			for _, m := range []struct {
				name string
				a    RuntimeAgreement
			}{{"stock", rt.Stock}, {"injected", rt.Injected}} {
				fmt.Fprintf(&b, "| %s | %s | %s | %d / %d | %s |\n", m.name, pct(m.a.VsEager.Positions), pct(m.a.VsEager.Prefix),
					m.a.VsEager.Ties, m.a.VsEager.NonTies, pct(m.a.VsOracle.Prefix))
			}
			pairs = append(pairs, pair{"stock graph vs stock eager", rt.Stock.VsEager},
				pair{"injected graph vs injected eager", rt.Injected.VsEager})
		}
		var rows []string
		for _, p := range pairs {
			for _, d := range p.a.Divergences {
				var own []string
				for _, m := range slices.Sorted(maps.Keys(d.ModelMargins)) {
					own = append(own, fmt.Sprintf("%s %s", m, f(d.ModelMargins[m])))
				}
				verdict := "not a tie"
				if d.Tie {
					verdict = "tie"
				}
				rows = append(rows, fmt.Sprintf("| %s | %d | %d | %v | %s | %s | %s | %s |", p.name, d.Prompt, d.Position,
					d.Tokens, f(d.OracleTop2Margin), f(d.OraclePickMargin), strings.Join(own, ", "), verdict))
			}
		}
		if len(rows) > 0 {
			fmt.Fprintf(&b, "\nEach first divergence. It is a tie when the fp32 model rates the two tokens less than %s apart: "+
				"the most stock "+r.HalfDtype()+" moves the fp32 model's top-1 − top-2 logit margin anywhere on the teacher-forced text. "+
				"A model's own margin of 0 means its logits for the two tokens were equal.\n\n", f(g.TieBound))
			b.WriteString("| compared | prompt | position | tokens | oracle top-2 margin | oracle margin between the two | models' own margins | verdict |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
			b.WriteString(strings.Join(rows, "\n") + "\n")
		}
	}
	if len(r.Layers) > 0 {
		b.WriteString("\n## Per layer: output error against the oracle\n\n")
		b.WriteString("| layer | injected mean rel | stock mean rel | injected / stock | injected cosine | stock cosine |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, l := range r.Layers {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", l.Name, f(l.Injected.MeanRel), f(l.Stock.MeanRel),
				ratioStr(l.Injected.MeanRel, l.Stock.MeanRel), f(l.Injected.Cosine), f(l.Stock.Cosine))
		}
	}
	b.WriteString("\n## Latency\n\n")
	if !r.Latency.Measured {
		fmt.Fprintf(&b, "Not measured: %s.\n", r.Latency.Reason)
	} else {
		writeLatency(&b, r)
	}
	writeRoofline(&b, r)
	if len(r.Injection.Kept) > 0 {
		b.WriteString("\n## Kept on the stock path\n\n| module | reason |\n| --- | --- |\n")
		for _, k := range r.Injection.Kept {
			fmt.Fprintf(&b, "| `%s` | %s |\n", k.Module, k.Reason)
		}
	}
	if len(plots) > 0 {
		b.WriteString("\n## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(filepath.Base(p), ".png"), filepath.Base(p))
		}
	}
	writeTimings(&b, r)
	return b.Bytes()
}

// writePlacement renders which devices ran which model (schema 3).
func writePlacement(b *bytes.Buffer, r *Result) {
	p := r.Device.Placement
	if p == nil {
		return
	}
	b.WriteString("## Placement\n\n")
	if r.Device.Count > 1 {
		fmt.Fprintf(b, "The %s models were split into %d pipeline stages (transformers' pipeline parallelism over "+
			"torch.distributed), one process and device each: each stage holds a run of decoder layers and sends its "+
			"hidden states to the next.\n\n", r.HalfDtype(), r.Device.Count)
	}
	if p.Stock != nil || p.Injected != nil {
		b.WriteString("| model | rank | host | device | decoder layers | also | MB held |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		for _, m := range []struct {
			name string
			p    *ModelPlacement
		}{{"stock " + r.HalfDtype(), p.Stock}, {"injected " + r.HalfDtype(), p.Injected}} {
			if m.p == nil {
				continue
			}
			for _, st := range m.p.Stages {
				fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %.1f |\n", m.name, st.Rank, st.Host, st.Device,
					layerRange(st.Layers), stageExtras(st), float64(st.Bytes)/1e6)
			}
		}
		b.WriteString("\n")
	}
	if o := p.Oracle; o != nil {
		where := fmt.Sprintf("rank %d, %s", o.Rank, o.Device)
		if o.Host != "" {
			where = fmt.Sprintf("rank %d on %s, %s", o.Rank, o.Host, o.Device)
		}
		switch o.Mode {
		case "layered":
			fmt.Fprintf(b, "fp32 oracle (%s): read from the checkpoint unit by unit (embeddings, each decoder layer, "+
				"final norm, head) as the forward reaches them; ", where)
			if o.StreamedLoads == 0 {
				fmt.Fprintf(b, "all %d units stayed on the device after their first load (%.1f MB, within a %.1f MB budget).\n\n",
					o.Units, float64(o.KeptBytes)/1e6, float64(o.BudgetBytes)/1e6)
			} else if o.HostLoads == 0 {
				fmt.Fprintf(b, "%d of %d units stayed on the device (%.1f MB of a %.1f MB budget), the others were read "+
					"from the checkpoint again on every pass: %d loads in all.\n\n",
					o.KeptUnits, o.Units, float64(o.KeptBytes)/1e6, float64(o.BudgetBytes)/1e6, o.Loads)
			} else {
				fmt.Fprintf(b, "%d of %d units stayed on the device (%.1f MB of a %.1f MB budget), the others were loaded "+
					"again on every pass: %d loads in all, %d of them copied from the %.1f MB of checkpoint tensors held "+
					"in host memory rather than read from the checkpoint.\n\n",
					o.KeptUnits, o.Units, float64(o.KeptBytes)/1e6, float64(o.BudgetBytes)/1e6, o.Loads, o.HostLoads,
					float64(o.HostBytes)/1e6)
			}
		default:
			fmt.Fprintf(b, "fp32 oracle (%s): the whole model, %.1f MB.\n\n", where, float64(o.Bytes)/1e6)
		}
	}
}

// layerRange shows decoder layers [start, end) with their count, so that a lone index (layer
// 0 of a one-layer model) does not read as a count: "0–15 (16 layers)", "0 (1 layer)".
func layerRange(l []int) string {
	switch {
	case len(l) != 2 || l[1] <= l[0]:
		return "none"
	case l[1]-l[0] == 1:
		return fmt.Sprintf("%d (1 layer)", l[0])
	}
	return fmt.Sprintf("%d–%d (%d layers)", l[0], l[1]-1, l[1]-l[0])
}

func stageExtras(st Stage) string {
	var parts []string
	for _, x := range []struct {
		on   bool
		name string
	}{{st.Embeddings, "embeddings"}, {st.Norm, "final norm"}, {st.Head, "head"}} {
		if x.on {
			parts = append(parts, x.name)
		}
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// PathLabel names a latency path in tables and plots.
func PathLabel(path string) string {
	switch path {
	case PathStockEager:
		return "stock eager"
	case PathStockCompiled:
		return "stock compiled"
	case PathStockGraph:
		return "stock graph"
	case PathInjectedGraph:
		return "injected graph"
	case PathInjectedCompiled:
		return "injected compiled"
	case PathInjectedEager:
		return "injected eager"
	case PathStockBest:
		return "stock best"
	}
	return strings.ReplaceAll(path, "_", " ")
}

// latencyPoints is one table of the latency section: its rows and how each is named.
type latencyPoints struct {
	title string
	unit  string
	rows  []LatencyRow
	name  func(LatencyRow) string
}

func (r *Result) latencyPoints() []latencyPoints {
	return []latencyPoints{
		{"prefill tokens (batch 1)", "ms", r.Latency.Prefill, func(x LatencyRow) string { return fmt.Sprint(x.Tokens) }},
		{"decode batch (512-token prompt)", "ms/token", r.Latency.Decode, func(x LatencyRow) string { return fmt.Sprint(x.Batch) }},
		{"batch", "ms", r.Latency.Forward, func(x LatencyRow) string { return fmt.Sprint(x.Batch) }},
	}
}

// measuredPaths are the paths that were measured (the run's list, where it has one) or have a
// number in any of rows, in report order: a path that failed keeps its column, with dashes.
func measuredPaths(attempted []string, rows []LatencyRow) []string {
	var out []string
	for _, p := range LatencyPaths {
		if slices.Contains(attempted, p) {
			out = append(out, p)
			continue
		}
		for _, x := range rows {
			if _, ok := x.Value(p); ok {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// measuredRatios are the LatencyRatios whose two paths both appear in paths.
func measuredRatios(paths []string) [][2]string {
	var out [][2]string
	for _, rp := range LatencyRatios {
		if slices.Contains(paths, rp[0]) && slices.Contains(paths, rp[1]) {
			out = append(out, rp)
		}
	}
	return out
}

func rowRatio(x LatencyRow, rp [2]string) string {
	a, okA := x.Value(rp[0])
	d, okD := x.Value(rp[1])
	if !okA || !okD {
		return "—"
	}
	return ratioStr(Num(a), Num(d))
}

func writeLatency(b *bytes.Buffer, r *Result) {
	anchor := ", the fastest stock path and the anchor"
	if r.hasStockExperts() {
		anchor = ""
	}
	fmt.Fprintf(b, "%s.\n\nPaths: stock eager and injected eager are plain forwards; stock compiled is transformers' "+
		"StaticCache under torch.compile(mode=\"reduce-overhead\")%s; injected "+
		"compiled is the injected model the same way; stock graph and injected graph run under the package's graph "+
		"runtime (captured once, replayed). A ratio below 1× means the first path is faster.\n\n", r.Latency.Method, anchor)
	if r.Latency.Default != "" {
		fmt.Fprintf(b, "The default path, which `xpuinject generate` and the package's card use: %s.\n\n",
			PathLabel(r.Latency.Default))
	}
	if line := r.pointsLine(); line != "" {
		b.WriteString(line + "\n\n")
	}
	if r.hasStockExperts() {
		b.WriteString("A mixture-of-experts model's stock is timed on each experts implementation transformers offers " +
			"(`experts_implementation`), eager and compiled: stock eager and stock compiled show their fastest, " +
			"stock best the fastest of all, the anchor here (every setting: the experts table below). Stock graph " +
			"runs the implementation the model loaded with.\n\n")
	}
	var setupRows []string
	for _, t := range r.latencyPoints() {
		if len(t.rows) == 0 {
			continue
		}
		paths := measuredPaths(r.Latency.Paths, t.rows)
		ratios := measuredRatios(paths)
		cols := []string{t.title}
		for _, p := range paths {
			cols = append(cols, PathLabel(p)+" "+t.unit)
		}
		for _, rp := range ratios {
			cols = append(cols, PathLabel(rp[0])+" / "+PathLabel(rp[1]))
		}
		fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat(" --- |", len(cols)))
		for _, x := range t.rows {
			cells := []string{t.name(x)}
			for _, p := range paths {
				if v, ok := x.Value(p); ok {
					cells = append(cells, f(Num(v)))
				} else {
					cells = append(cells, "—")
				}
			}
			for _, rp := range ratios {
				cells = append(cells, rowRatio(x, rp))
			}
			fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
			var setup []string
			for _, p := range LatencyPaths {
				if s, ok := x.SetupS[p]; ok && !math.IsNaN(float64(s)) {
					what := "capture"
					if p == PathStockCompiled || p == PathInjectedCompiled {
						what = "compile"
					}
					setup = append(setup, fmt.Sprintf("%s %s %s s", PathLabel(p), what, seconds(float64(s))))
				}
			}
			if len(setup) > 0 {
				setupRows = append(setupRows, fmt.Sprintf("| %s %s | %s |", strings.SplitN(t.title, " ", 2)[0], t.name(x), strings.Join(setup, "; ")))
			}
		}
		b.WriteString("\n")
	}
	if len(setupRows) > 0 {
		b.WriteString("One-time cost before the first timed call (compile: torch.compile and its graph recording; capture: " +
			"the runtime's warm-ups and graph capture):\n\n| point | setup |\n| --- | --- |\n")
		b.WriteString(strings.Join(setupRows, "\n") + "\n\n")
	}
	if line := compileAheadLine(r.Latency.CompileAhead); line != "" {
		b.WriteString(line + "\n\n")
	}
	for _, p := range LatencyPaths {
		if msg, ok := r.Latency.Errors[p]; ok {
			fmt.Fprintf(b, "- %s: no numbers: %s\n", PathLabel(p), msg)
		}
	}
	if len(r.Latency.Errors) > 0 {
		b.WriteString("\n")
	}
	var peak []string
	for _, side := range []string{"stock", "injected"} {
		if v, ok := r.Latency.PeakMemoryBytes[side]; ok {
			peak = append(peak, fmt.Sprintf("%s %.1f MB", side, float64(v)/1e6))
		} else if msg, ok := r.Latency.Errors["peak memory "+side]; ok {
			peak = append(peak, fmt.Sprintf("%s not measured (%s)", side, msg))
		}
	}
	if len(peak) > 0 {
		fmt.Fprintf(b, "Peak memory during the longest prefill: %s.\n", strings.Join(peak, ", "))
	}
	writeStockExperts(b, r)
}

// compileAheadLine says which compiled paths helper processes compiled while the eval's earlier
// stages ran and whether they timed them too, which points the eval timed itself instead, and
// whether its own compiles then hit the cache ("" when no helper set anything up).
func compileAheadLine(c *CompileAhead) string {
	if c == nil {
		return ""
	}
	var done, not []string
	timedAll := true
	for _, h := range c.Helpers {
		switch {
		case h.Error != "":
			not = append(not, fmt.Sprintf("%s failed (%s)", h.Side, h.Error))
		case h.Skipped != "":
			not = append(not, fmt.Sprintf("%s not (%s)", h.Side, h.Skipped))
		default:
			done = append(done, fmt.Sprintf("%s (%s s)", PathLabel(h.Path), seconds(float64(h.S))))
			timedAll = timedAll && len(h.Timed) > 0
		}
	}
	if len(done) == 0 {
		return ""
	}
	line := "Compiled ahead: helper processes compiled " + strings.Join(done, " and ") +
		" while the accuracy and generation stages ran"
	if timedAll {
		line += ", and timed them there by the same code, the eval and the other helper waiting " +
			"through each timed loop; a compiled path's set-up above is its helper's"
	} else {
		line += ", into the inductor and Triton caches"
	}
	for _, f := range c.Fallbacks {
		line += fmt.Sprintf("; %s at %s timed by the eval itself (%s)", PathLabel(f.Path), f.Point, f.Why)
	}
	if hit, miss := c.DriverCache["fxgraph_hit"], c.DriverCache["fxgraph_miss"]; hit+miss > 0 {
		line += fmt.Sprintf("; the eval's own compiles found %d of %d graphs in the cache, so such a "+
			"compile set-up is dynamo's trace, the cache load and the graph recording", hit, hit+miss)
	}
	if len(not) > 0 {
		line += "; " + strings.Join(not, "; ")
	}
	return line + "."
}

// pointsLine says which points were timed, under which preset, and what --latency-points full
// would add after quick ("" for a file that does not record the preset).
func (r *Result) pointsLine() string {
	l := r.Latency
	if l.Points == "" {
		return ""
	}
	var timed []string
	kinds := []struct {
		kind, one, many string
		ns              []int
	}{
		{"prefill", "prefill", "prefill", rowInts(l.Prefill, func(x LatencyRow) int { return x.Tokens })},
		{"decode", "decode batch", "decode batches", rowInts(l.Decode, func(x LatencyRow) int { return x.Batch })},
		{"forward", "batch", "batches", rowInts(l.Forward, func(x LatencyRow) int { return x.Batch })},
	}
	var adds []string
	for _, k := range kinds {
		if len(k.ns) > 0 {
			timed = append(timed, pointsPhrase(k.one, k.many, k.ns))
		}
		if ns := l.FullAdds[k.kind]; len(ns) > 0 {
			adds = append(adds, pointsPhrase(k.one, k.many, ns))
		}
	}
	how := "`--latency-points " + l.Points + "`"
	for _, fl := range l.PointsFlags {
		how += ", `" + fl + "` given"
	}
	line := fmt.Sprintf("Points timed (%s): %s", how, strings.Join(timed, "; "))
	if len(adds) > 0 {
		line += "; `--latency-points full` adds " + strings.Join(adds, " and ")
	}
	return line + "."
}

func rowInts(rows []LatencyRow, get func(LatencyRow) int) []int {
	var out []int
	for _, x := range rows {
		out = append(out, get(x))
	}
	return out
}

// pointsPhrase is "decode batch 8" or "decode batches 1, 8 and 32".
func pointsPhrase(one, many string, ns []int) string {
	if len(ns) == 1 {
		return fmt.Sprintf("%s %d", one, ns[0])
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return many + " " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func (r *Result) hasStockExperts() bool {
	for _, t := range r.latencyPoints() {
		for _, x := range t.rows {
			if len(x.StockExperts) > 0 {
				return true
			}
		}
	}
	return false
}

// writeStockExperts is the table of a mixture-of-experts model's stock on each experts
// implementation: one row per point and implementation, the anchor in bold, and why each
// setting that could not run failed.
func writeStockExperts(b *bytes.Buffer, r *Result) {
	if !r.hasStockExperts() {
		return
	}
	b.WriteString("\n### Stock on each experts implementation\n\n")
	b.WriteString("ms (per token for decode); the fastest of a point, the anchor (stock best), in bold; " +
		"— could not run (why: below).\n\n")
	b.WriteString("| point | experts_implementation | stock eager | stock compiled |\n| --- | --- | --- | --- |\n")
	type failure struct{ path, impl, why string }
	var failures []failure
	failedAt := map[failure][]string{}
	for _, t := range r.latencyPoints() {
		for _, x := range t.rows {
			point := strings.SplitN(t.title, " ", 2)[0] + " " + t.name(x)
			var impls []string
			cells := map[[2]string]string{}
			for _, e := range x.StockExperts {
				if !slices.Contains(impls, e.ExpertsImplementation) {
					impls = append(impls, e.ExpertsImplementation)
				}
				c := "—"
				if !math.IsNaN(float64(e.MS)) {
					c = f(e.MS)
					if x.Anchor != nil && x.Anchor.Path == e.Path && x.Anchor.ExpertsImplementation == e.ExpertsImplementation {
						c = "**" + c + "**"
					}
				}
				if e.Error != "" {
					k := failure{e.Path, e.ExpertsImplementation, e.Error}
					if _, seen := failedAt[k]; !seen {
						failures = append(failures, k)
					}
					failedAt[k] = append(failedAt[k], point)
				}
				cells[[2]string{e.ExpertsImplementation, e.Path}] = c
			}
			for _, impl := range impls {
				cell := func(p string) string {
					if c, ok := cells[[2]string{impl, p}]; ok {
						return c
					}
					return "not timed"
				}
				fmt.Fprintf(b, "| %s | %s | %s | %s |\n", point, impl, cell(PathStockEager), cell(PathStockCompiled))
			}
		}
	}
	b.WriteString("\n")
	for _, k := range failures {
		fmt.Fprintf(b, "- %s, %s experts (%s): %s\n", PathLabel(k.path), k.impl, strings.Join(failedAt[k], ", "), k.why)
	}
	if len(failures) > 0 {
		b.WriteString("\n")
	}
}

// writeRoofline is a mixture-of-experts model's active-bytes roofline at batch 1, with each
// path's measured decode at batch 1 against it.
func writeRoofline(b *bytes.Buffer, r *Result) {
	rf := r.Roofline
	if rf == nil {
		return
	}
	fmt.Fprintf(b, "\n## Active-bytes roofline at batch 1\n\n%s: %.3f GB / %.1f TB/s = **%s ms** per token "+
		"(%s, top-%d experts; every expert's weights would be %.3f GB).\n\n", capitalize(rf.Method),
		float64(rf.TotalBytes)/1e9, float64(rf.BandwidthBps)/1e12, f(rf.MS), rf.Dtype, rf.TopK, float64(rf.ExpertsBytes)/1e9)
	b.WriteString("| part | MB | share |\n| --- | --- | --- |\n")
	for _, p := range RooflineParts {
		n, ok := rf.Bytes[p[0]]
		if !ok || (n == 0 && p[0] == "other") {
			continue
		}
		share := "—"
		if rf.TotalBytes > 0 {
			share = fmt.Sprintf("%.1f %%", 100*float64(n)/float64(rf.TotalBytes))
		}
		fmt.Fprintf(b, "| %s | %.3f | %s |\n", p[1], float64(n)/1e6, share)
	}
	for _, x := range r.Latency.Decode {
		if x.Batch != 1 {
			continue
		}
		var parts []string
		for _, p := range measuredPaths(r.Latency.Paths, []LatencyRow{x}) {
			if v, ok := x.Value(p); ok && rf.MS > 0 {
				parts = append(parts, fmt.Sprintf("%s %s ms (%.2f× the roofline)", PathLabel(p), f(Num(v)), v/float64(rf.MS)))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(b, "\nDecode at batch 1: %s.\n", strings.Join(parts, ", "))
		}
	}
}

// seconds prints a duration with two decimals below 10 s (captures take fractions of one).
func seconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.2f", s)
	}
	return fmt.Sprintf("%.1f", s)
}

func describeInput(in map[string]any) string {
	switch in["kind"] {
	case "text":
		return fmt.Sprintf("%v tokens of `%v`", in["tokens"], filepath.Base(fmt.Sprint(in["source"])))
	case "images":
		return fmt.Sprintf("%v generated %vx%v images (gradients, stripes, checkerboards, noise)", in["count"], in["size"], in["size"])
	}
	return fmt.Sprint(in)
}

func pct(n Num) string {
	if math.IsNaN(float64(n)) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n))
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// writeTimings is the "Where the time went" section: each stage's wall seconds and share of
// the run's, and what no stage names.
func writeTimings(b *bytes.Buffer, r *Result) {
	t := r.Timings
	if t == nil || len(t.Stages) == 0 {
		return
	}
	wall := float64(t.WallS)
	b.WriteString("\n## Where the time went\n\n")
	if wall <= 0 {
		wall = float64(t.DriverS)
		fmt.Fprintf(b, "The eval driver's stages (its wall: %s s).\n\n", seconds(wall))
	} else {
		fmt.Fprintf(b, "The whole run, %s s from the command's start to this report.\n\n", seconds(wall))
	}
	compiles := 0
	for _, s := range t.Stages {
		compiles += s.Compiles
	}
	if compiles > 0 {
		fmt.Fprintf(b, "Kernel compiles: the Triton JIT compiles during the stage (%d in all).\n\n", compiles)
		b.WriteString("| stage | s | share | kernel compiles |\n| --- | --- | --- | --- |\n")
	} else {
		b.WriteString("| stage | s | share |\n| --- | --- | --- |\n")
	}
	share := func(s float64) string {
		if wall <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f %%", 100*s/wall)
	}
	row := func(name string, s float64, n int) {
		fmt.Fprintf(b, "| %s | %s | %s |", name, seconds(s), share(s))
		if compiles > 0 {
			if n > 0 {
				fmt.Fprintf(b, " %d |", n)
			} else {
				b.WriteString("  |")
			}
		}
		b.WriteString("\n")
	}
	for _, s := range t.Stages {
		row(s.Stage, float64(s.S), s.Compiles)
	}
	if t.WallS > 0 {
		row("other (no stage names it)", t.Other(), 0)
	}
}

// routesLine says when the plan's vendor routes were measured on another GPU than the one the
// eval ran on (dev: the data files of the eval's device): its latency is not what that
// device's routes give. "" when they agree, or when either side is unknown.
func routesLine(planGPU string, dev []string) string {
	if planGPU == "" || len(dev) != 1 {
		return ""
	}
	own := strings.TrimSuffix(path.Base(dev[0]), ".json")
	if own == planGPU {
		return ""
	}
	return fmt.Sprintf("- **vendor routes planned for another GPU:** the plan was made for `--gpu %s`, and this "+
		"device's measured data is %s: `xpuinject MODEL` without --gpu (or with --gpu %s) plans with its routes\n",
		planGPU, dev[0], own)
}
