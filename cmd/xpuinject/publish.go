package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/xpuinject/xpuinject/harness"
	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/emit"
	"github.com/xpuinject/xpuinject/inject/plan"
)

// publishSet is what one push publishes: a kernel package and, when PackedDir is set, its
// packed weights with the source model's files and the eval that measured them.
type publishSet struct {
	PackageDir string
	PackedDir  string // "": the kernel repository only
	SourceDir  string // "": from the packed plan's source
	EvalFile   string // "": no eval recorded in the packed card
}

type publishOptions struct {
	RepoID       string // kernel repository
	PackedRepoID string // "": RepoID + "-packed"
	Private      bool
	Version      int
	DryRun       bool
	Model        string
	// SourceRepo is the Hub model (ORG/NAME[@REVISION]) the cards name when the plan was
	// made from a local folder, whose path means nothing to a Hub user.
	SourceRepo string
}

// publishResult is push's result (--json): one entry per repository.
type publishResult struct {
	Kernel *hub.PushResult `json:"kernel"`
	Packed *hub.PushResult `json:"packed,omitempty"`
}

// sourceFiles are what the packed repo copies from the source checkpoint: what
// from_pretrained and the tokenizer / image processor read besides the weights.
var sourceFiles = []string{
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "preprocessor_config.json",
}

// publish pushes the packed weights first (the larger upload, so a failure there leaves
// the kernel repository as it was), then the kernel package.
func publish(ctx context.Context, f *Factory, set publishSet, o publishOptions) (*publishResult, error) {
	c := newHubClient(f)
	pkg, err := hub.LoadPackage(set.PackageDir)
	if err != nil {
		return nil, err
	}
	// A package xpuinject wrote carries its plan; another kernel-hub package is published as it is.
	pp := &emit.PackagePlan{Plan: &plan.Plan{}}
	if _, err := os.Stat(filepath.Join(set.PackageDir, plan.FileName)); err == nil {
		if pp, err = emit.ReadPlan(set.PackageDir); err != nil {
			return nil, err
		}
	} else if o.SourceRepo != "" {
		return nil, &usageError{fmt.Errorf("--source-repo-id: %s has no plan.yaml whose source it could name", set.PackageDir)}
	}
	src := pp.Plan.Source
	if pp.File != "" {
		if src, err = cardSource(pp.Plan, o.SourceRepo); err != nil {
			return nil, err
		}
	}
	packedID := o.PackedRepoID
	if packedID == "" {
		packedID = emit.PackedRepoID(o.RepoID)
	}
	version := o.Version
	if version == 0 {
		version = max(pkg.Version(), 1)
	}
	license := pkg.Metadata[pkg.Variants[0]].License
	var kernelCard []byte
	if src != pp.Plan.Source {
		// The package's card names the local folder: render it again for the Hub model.
		pl := *pp.Plan
		pl.Source = src
		cls := ""
		if dir, err := sourceDir(f, set.SourceDir, pp.Plan); err == nil {
			cls = configClass(filepath.Join(dir, "config.json"))
		}
		kernelCard = emit.Card(&pl, emit.Options{Name: pkg.Name(), Version: version, License: license, RepoID: o.RepoID,
			PackedRepoID: packedID, ModelClass: cls, Model: src.Repo, Tool: tool()})
	}
	res := &publishResult{}
	if set.PackedDir != "" {
		files, summary, err := packedRepoFiles(f, set, packedID, o.RepoID, version, license, src)
		if err != nil {
			return nil, err
		}
		res.Packed, err = hub.PushModel(ctx, c, files, hub.ModelPushOptions{
			RepoID: packedID, Private: o.Private, DryRun: o.DryRun, Progress: f.ErrOut,
			Summary:     fmt.Sprintf("xpuinject %s: packed weights of %s for %s", Version, summary, o.RepoID),
			Description: fmt.Sprintf("Published with xpuinject %s.\nKernel package: %s (v%d)\nModel: %s\n", Version, o.RepoID, version, summary),
		})
		if err != nil {
			return nil, fmt.Errorf("packed weights to %s: %w (the kernel package was not published)", packedID, err)
		}
	}
	res.Kernel, err = hub.Push(ctx, c, set.PackageDir, hub.PushOptions{
		RepoID: o.RepoID, Private: o.Private, Version: o.Version, DryRun: o.DryRun, Model: o.Model,
		ToolVersion: Version, Progress: f.ErrOut, Card: kernelCard,
	})
	if err != nil {
		if res.Packed != nil && !o.DryRun {
			return nil, fmt.Errorf("%w (the packed weights were published to %s)", err, res.Packed.URL)
		}
		return nil, err
	}
	return res, nil
}

// packedRepoFiles lists the packed repo's files: the packed tensors (streamed from disk),
// plan.yaml, the source model's config / generation / tokenizer files, and the card. It
// also returns how the card names the source model.
func packedRepoFiles(f *Factory, set publishSet, packedID, kernelRepo string, version int, license string,
	src plan.Source) ([]hub.PackageFile, string, error) {
	planBytes, err := os.ReadFile(filepath.Join(set.PackedDir, "plan.yaml"))
	if err != nil {
		return nil, "", fmt.Errorf("packed weights %s: %w", set.PackedDir, err)
	}
	pl, err := plan.ParseYAML(planBytes)
	if err != nil {
		return nil, "", fmt.Errorf("packed weights %s: %w", set.PackedDir, err)
	}
	names, err := packedTensorFiles(set.PackedDir)
	if err != nil {
		return nil, "", err
	}
	var files []hub.PackageFile
	for _, n := range append(names, "plan.yaml") {
		pf, err := hub.LocalFile(n, filepath.Join(set.PackedDir, n))
		if err != nil {
			return nil, "", err
		}
		files = append(files, pf)
	}
	srcDir, err := sourceDir(f, set.SourceDir, pl)
	if err != nil {
		return nil, "", err
	}
	pl.Source = src // the Hub model the card names
	var cls string
	for _, n := range sourceFiles {
		p := filepath.Join(srcDir, n)
		if _, err := os.Stat(p); err != nil {
			if n == "config.json" {
				return nil, "", fmt.Errorf("source model %s has no config.json (pass --source with the checkpoint folder)", srcDir)
			}
			continue
		}
		pf, err := hub.LocalFile(n, p)
		if err != nil {
			return nil, "", err
		}
		files = append(files, pf)
		if n == "config.json" {
			cls = configClass(p)
		}
	}
	card := emit.ModelCardOptions{
		RepoID: packedID, License: license, Tool: "xpuinject " + Version,
		Usage: emit.Usage{ModelClass: cls, KernelRepo: kernelRepo, Version: version, PackedRepo: packedID},
	}
	if set.EvalFile != "" {
		ev, err := harness.ReadResult(set.EvalFile)
		if err != nil {
			return nil, "", fmt.Errorf("--eval: %w", err)
		}
		card.Eval = evalSummary(ev)
	}
	files = append(files, hub.PackageFile{Path: "README.md", Data: emit.ModelCard(pl, card)})
	label := pl.Source.Repo
	if label == "" {
		label = filepath.Base(pl.Source.Path)
	}
	return files, label, nil
}

// packedTensorFiles lists the packed folder's safetensors: the shards its index names and
// the index, or model.safetensors.
func packedTensorFiles(dir string) ([]string, error) {
	idx := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idx); err == nil {
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ix); err != nil || len(ix.WeightMap) == 0 {
			return nil, fmt.Errorf("packed weights %s: model.safetensors.index.json has no weight_map", dir)
		}
		seen := map[string]bool{}
		var out []string
		for _, shard := range ix.WeightMap {
			if !seen[shard] {
				if filepath.Base(shard) != shard {
					return nil, fmt.Errorf("packed weights %s: index names shard %q outside the folder", dir, shard)
				}
				seen[shard] = true
				out = append(out, shard)
			}
		}
		sort.Strings(out)
		return append(out, "model.safetensors.index.json"), nil
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		return nil, fmt.Errorf("packed weights %s: no model.safetensors or model.safetensors.index.json (a folder written by xpuinject pack?)", dir)
	}
	return []string{"model.safetensors"}, nil
}

// sourceDir finds the source checkpoint: --source, the plan's local folder, or the plan's
// Hub snapshot in the HF cache.
func sourceDir(f *Factory, flag string, pl *plan.Plan) (string, error) {
	switch {
	case flag != "":
		return flag, nil
	case pl.Source.Path != "":
		if isDir(pl.Source.Path) {
			return pl.Source.Path, nil
		}
		return "", fmt.Errorf("the plan's source folder %s is gone: pass --source with the checkpoint folder", pl.Source.Path)
	case pl.Source.Repo != "":
		cache := hub.CacheFromEnv(f.Getenv)
		rev := pl.Source.Revision
		if rev == "" {
			rev = "main"
		}
		dir, _, err := cache.LocalSnapshot("model", pl.Source.Repo, rev)
		if errors.Is(err, hub.ErrNotCached) {
			return "", fmt.Errorf("the source model %s@%s is not in the HF cache (%s): run 'xpuinject fetch %s@%s' or pass --source",
				pl.Source.Repo, rev, cache.Dir, pl.Source.Repo, rev)
		}
		return dir, err
	}
	return "", errors.New("the plan names no source model: pass --source with the checkpoint folder")
}

// configClass is config.json's architectures[0], "" when it names none.
func configClass(path string) string {
	var cfg struct {
		Architectures []string `json:"architectures"`
	}
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &cfg) == nil && len(cfg.Architectures) > 0 {
		return cfg.Architectures[0]
	}
	return ""
}

// evalSummary is the part of an eval.json a packed card records: the accuracy ratios and
// the latency ratios.
func evalSummary(r *harness.Result) *emit.EvalSummary {
	s := &emit.EvalSummary{Device: r.Device.Type, DType: r.HalfDtype()}
	if r.Device.Name != "" && r.Device.Name != r.Device.Type {
		s.Device = r.Device.Name
	}
	if r.Device.Count > 1 {
		s.Device += fmt.Sprintf(" ×%d, one pipeline stage each", r.Device.Count)
	}
	if r.Device.Interpret {
		s.Device += ", kernels under the Triton interpreter"
	}
	f := func(n *harness.Num) float64 {
		if n == nil {
			return math.NaN()
		}
		return float64(*n)
	}
	inj, st := metricValues(r.Accuracy.Injected), metricValues(r.Accuracy.Stock)
	for _, k := range []string{"cosine", "mean_abs", "max_abs", "mean_rel", "max_rel", "kl", "top1_agreement", "perplexity"} {
		if c, ok := r.Accuracy.Compare[k]; ok {
			s.Accuracy = append(s.Accuracy, emit.EvalRow{What: k, Injected: float64(c.Injected), Stock: float64(c.Stock), Ratio: f(c.Ratio)})
		} else if a, ok := inj[k]; ok && len(r.Accuracy.Compare) == 0 {
			// an eval.json without the compare table: the same ratio from its two sides
			s.Accuracy = append(s.Accuracy, emit.EvalRow{What: k, Injected: a, Stock: st[k], Ratio: a / st[k]})
		}
	}
	lat := r.Latency
	add := func(what string, row harness.LatencyRow) {
		if pair, v, ok := row.Headline(); ok {
			what += fmt.Sprintf(" (%s / %s)", harness.PathLabel(pair[0]), harness.PathLabel(pair[1]))
			s.Latency = append(s.Latency, emit.EvalRow{What: what, Ratio: v})
		}
	}
	for _, row := range lat.Prefill {
		add(fmt.Sprintf("prefill %d tokens, batch %d", row.Tokens, row.Batch), row)
	}
	for _, row := range lat.Decode {
		add(fmt.Sprintf("decode, batch %d, context %d", row.Batch, row.Context), row)
	}
	for _, row := range lat.Forward {
		add(fmt.Sprintf("forward, batch %d", row.Batch), row)
	}
	if !lat.Measured {
		s.LatencyNote = lat.Reason
	}
	s.LatencyMethod = lat.Method
	return s
}

// metricValues are a Metrics' numbers by their eval.json names (absent ones left out).
func metricValues(m harness.Metrics) map[string]float64 {
	out := map[string]float64{"cosine": float64(m.Cosine), "mean_abs": float64(m.MeanAbs), "max_abs": float64(m.MaxAbs),
		"mean_rel": float64(m.MeanRel), "max_rel": float64(m.MaxRel)}
	for k, v := range map[string]*harness.Num{"kl": m.KL, "top1_agreement": m.Top1, "perplexity": m.Perplexity} {
		if v != nil {
			out[k] = float64(*v)
		}
	}
	return out
}

// cardSource is the source model the published cards name: the plan's Hub repository, or
// for a plan made from a local folder the Hub model --source-repo-id names (the folder's
// path would tell Hub users to load a folder only this machine has).
func cardSource(pl *plan.Plan, flag string) (plan.Source, error) {
	if pl.Source.Repo != "" {
		if flag != "" {
			return plan.Source{}, &usageError{fmt.Errorf("--source-repo-id %s: the plan already names its source, %s; "+
				"drop the flag", flag, pl.Source.Repo)}
		}
		return pl.Source, nil
	}
	if flag == "" {
		return plan.Source{}, &usageError{fmt.Errorf("the package was planned from a local folder, %s\n"+
			"Hub users cannot load it: pass --source-repo-id ORG/NAME[@REVISION], the Hub model the folder holds",
			pl.Source.Path)}
	}
	ref, err := parseSourceRepo(flag)
	if err != nil {
		return plan.Source{}, err
	}
	return plan.Source{Path: pl.Source.Path, Repo: ref.Repo, Revision: ref.Revision}, nil
}

// parseSourceRepo checks --source-repo-id: ORG/NAME, with an optional @REVISION.
func parseSourceRepo(flag string) (hub.Ref, error) {
	ref, err := hub.ParseRef(flag)
	if err != nil {
		return ref, &usageError{fmt.Errorf("--source-repo-id %q: want ORG/NAME[@REVISION], a Hub model id", flag)}
	}
	if !strings.Contains(flag, "@") {
		ref.Revision = "" // the card then loads the repo's default branch, as from_pretrained does
	}
	return ref, nil
}
