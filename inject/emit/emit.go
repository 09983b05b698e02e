// Package emit writes the kernel-hub package that carries a plan out (the embedded
// kernel sources, metadata.json, build.toml, plan.yaml, the card), the packed-weights
// card, and reads a package's plan back with its digests (verify.go).
package emit

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
)

// Options configure the kernel-hub package written by Write.
type Options struct {
	// Name is the kernel name (^[a-z][-a-z0-9]*[a-z0-9]$); derived from the model when empty.
	Name string
	// Version is the kernel's major version (branch v<Version> on the Hub). Default 1.
	Version int
	// License is an SPDX id for the card and metadata. Default "apache-2.0".
	License string
	// RepoID is the Hub repository the package is meant for ("" when unknown).
	RepoID string
	// PackedRepoID is the model repo of its packed weights (default RepoID + "-packed").
	PackedRepoID string
	// ModelClass is the transformers class of the source model (config.json's
	// architectures[0]) for the card's usage snippet; "" picks an Auto class.
	ModelClass string
	// Model names the model the package was generated for (card, commit messages).
	Model string
	// Tool is "xpuinject <version>".
	Tool string
	// Extra files written at the package root, by relative path.
	Extra map[string][]byte
	// Force replaces an earlier package in the output folder; any other non-empty
	// folder is refused whatever Force says (package outdir).
	Force bool
	// Inputs are what the run reads (the source checkpoint): the output may not be, hold
	// or sit inside one.
	Inputs []outdir.Input
}

// The variants a package carries: pure-Python ("noarch") Triton kernels, one folder
// per backend. kernels' resolver picks build/torch-<backend>/ for the running torch
// (kernels/variants.py: noarch variants match by backend name; torch-universal is the
// legacy any-backend name).
var emitBackends = []string{"cuda", "xpu"}

// MetadataKey is the key of xpuinject's own object in each variant's metadata.json
// ({"plan_sha256": ...}); the kernels library ignores keys it does not know.
const MetadataKey = "xpuinject"

// KernelName derives a valid kernel name from a model reference or folder name:
// "meta-llama/Llama-3.2-1B" -> "xpuinject-llama-3-2-1b".
func KernelName(model string) string {
	base := model
	if i := strings.LastIndexAny(base, `/\`); i >= 0 {
		base = base[i+1:]
	}
	if i := strings.Index(base, "@"); i >= 0 {
		base = base[:i]
	}
	var b strings.Builder
	b.WriteString("xpuinject-")
	dash := true
	for _, r := range strings.ToLower(base) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// ModuleName is the Python module name of a kernel name ("-" -> "_"), as kernels does
// (KernelName.python_name).
func ModuleName(name string) string { return strings.ReplaceAll(name, "-", "_") }

// Result lists what Write wrote.
type Result struct {
	Dir   string
	Name  string
	Files []string // relative paths, sorted
}

// Write writes the kernel-hub package for plan into outDir:
//
//	README.md                      card (front matter library_name: kernels)
//	build.toml                     kernel-builder description of a noarch Triton kernel
//	plan.yaml                      the plan the package was generated for
//	torch-ext/<module>/            the sources, contract.json and plan.yaml, where kernel-builder expects them
//	build/torch-<backend>/         the loadable variants: the same files + metadata.json
//	<Extra...>
//
// The folder is an xpuinject output (package outdir): assembled aside and renamed into
// place, so a failed or interrupted emit never leaves a half-written package. Cancelling
// ctx stops it before the next file; the earlier package stays as it was.
func Write(ctx context.Context, pl *plan.Plan, outDir string, opts Options) (*Result, error) {
	if pl == nil {
		return nil, fmt.Errorf("inject: emit: no plan")
	}
	if opts.Name == "" {
		model := opts.Model
		if model == "" {
			base := pl.Source.Path
			if base != "" {
				base = filepath.Base(base)
			}
			model = cmp.Or(pl.Source.Repo, base, pl.Arch)
		}
		opts.Name = KernelName(model)
	}
	if !hub.KernelNamePattern.MatchString(opts.Name) {
		return nil, fmt.Errorf("inject: emit: kernel name %q is not valid (want %s)", opts.Name, hub.KernelNamePattern)
	}
	if opts.Version <= 0 {
		opts.Version = 1
	}
	if opts.License == "" {
		opts.License = "apache-2.0"
	}
	files, err := packageFiles(pl, opts)
	if err != nil {
		return nil, err
	}
	tx, err := outdir.Begin(outDir, outdir.Options{Kind: outdir.KindPackage, Tool: opts.Tool, Replace: opts.Force, Inputs: opts.Inputs})
	if err != nil {
		return nil, fmt.Errorf("inject: emit: %w", err)
	}
	defer tx.Abort() // nothing once committed
	paths := slices.Sorted(maps.Keys(files))
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("inject: emit: interrupted before %s (the earlier package, if any, is as it was): %w", p, err)
		}
		if err := tx.WriteFile(p, files[p]); err != nil {
			return nil, fmt.Errorf("inject: emit: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inject: emit: interrupted before the package was put in place: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("inject: emit: %w", err)
	}
	return &Result{Dir: outDir, Name: opts.Name, Files: paths}, nil
}

// packageFiles builds the whole tree in memory (it is small: sources + card).
func packageFiles(pl *plan.Plan, opts Options) (map[string][]byte, error) {
	module := ModuleName(opts.Name)
	files := map[string][]byte{}
	srcHash := sha256.New()
	for _, name := range kernels.SourceFiles() {
		b, err := fs.ReadFile(kernels.Sources, kernels.SourceDir+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("inject: emit: embedded %s: %w", name, err)
		}
		fmt.Fprintf(srcHash, "%s\x00%d\x00", name, len(b))
		srcHash.Write(b)
		files["torch-ext/"+module+"/"+name] = b
		for _, be := range emitBackends {
			files["build/torch-"+be+"/"+name] = b
		}
	}
	planYAML, err := plan.MarshalYAML(pl)
	if err != nil {
		return nil, fmt.Errorf("inject: emit: plan: %w", err)
	}
	// The plan is part of what the package runs (its inject reads it), so it is part of the
	// id too: two packages of one model with different plans never share a module name.
	fmt.Fprintf(srcHash, "%s\x00%d\x00", "plan.yaml", len(planYAML))
	srcHash.Write(planYAML)
	digest := hex.EncodeToString(srcHash.Sum(nil))[:7]
	planSum := sha256.Sum256(planYAML)
	files[plan.FileName] = planYAML
	// The package's inject reads its plan from its own folder: get_kernel fetches only the
	// variant folder, so each carries the same bytes (and so do the kernel-builder sources).
	files["torch-ext/"+module+"/"+plan.FileName] = planYAML
	for _, be := range emitBackends {
		files["build/torch-"+be+"/"+plan.FileName] = planYAML
	}
	for _, be := range emitBackends {
		meta := map[string]any{
			"name": opts.Name,
			// kernel-builder ids are _<module>_<backend>_<hash>; the id names the module
			// in sys.modules, so two variants or versions never collide.
			"id":             fmt.Sprintf("_%s_%s_%s", module, be, digest),
			"version":        opts.Version,
			"kernels-minver": kernelsMinVersion,
			"license":        opts.License,
			"python-depends": []string{},
			"kernel-depends": []string{},
			"backend":        map[string]any{"type": be},
			"digest":         variantDigest(files, "build/torch-"+be+"/"),
			// the plan this package was written for (PLAN.md, "Plan digest")
			MetadataKey: map[string]any{"plan_sha256": hex.EncodeToString(planSum[:])},
		}
		b, err := json.MarshalIndent(meta, "", "  ")
		if err != nil {
			return nil, err
		}
		files["build/torch-"+be+"/metadata.json"] = append(b, '\n')
	}
	files["build.toml"] = buildTOML(opts, pyExtensions(files, "torch-ext/"+module+"/"))
	files["README.md"] = Card(pl, opts)
	for p, b := range opts.Extra {
		clean := filepath.ToSlash(filepath.Clean(p))
		if strings.HasPrefix(clean, "../") || filepath.IsAbs(p) || strings.HasPrefix(clean, "build/") {
			return nil, fmt.Errorf("inject: emit: extra file %q must be a relative path outside build/", p)
		}
		files[clean] = b
	}
	return files, nil
}

// kernelsMinVersion is the oldest kernels release that loads the variants: kernel-builder's
// baseline for a kernel without kernel dependencies (Build::required_kernels_version in
// huggingface/kernels, kernels-common/src/config).
const kernelsMinVersion = "0.14.0"

// buildEdition is the build.toml edition the kernels library reads as current (0.17.2 parses
// editions 5 and, upgrading with a warning, the unversioned legacy format; 6 it refuses).
const buildEdition = 5

// variantDigest is metadata.json's "digest" as kernel-builder writes it and the kernels
// library checks it (Digest::hash_variant, huggingface/kernels kernels-common/src/digest.rs):
// {"algorithm": "sha256", "files": {path: base64(sha256(content))}} over every file of the
// variant folder, paths relative to it with "/" separators, except metadata.json and
// metadata.json.sigstore at its top (which hold the digest) and Python bytecode.
func variantDigest(files map[string][]byte, prefix string) map[string]any {
	hashes := map[string]string{}
	for p, b := range files {
		rel, ok := strings.CutPrefix(p, prefix)
		if !ok || rel == "metadata.json" || rel == "metadata.json.sigstore" || strings.HasSuffix(rel, ".pyc") ||
			strings.Contains("/"+rel, "/__pycache__/") {
			continue
		}
		sum := sha256.Sum256(b)
		hashes[rel] = base64.StdEncoding.EncodeToString(sum[:])
	}
	return map[string]any{"algorithm": "sha256", "files": hashes}
}

// pyExtensions are the extensions of every file under prefix, sorted: what build.toml's
// pyext must list for kernel-builder to copy them all into the variants (it copies only
// torch-ext files of these extensions, "py" and "pyi" by default; nix-builder/lib/
// source-set.nix in huggingface/kernels), the package's JSON and YAML data included.
func pyExtensions(files map[string][]byte, prefix string) []string {
	seen := map[string]bool{}
	for p := range files {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			if ext := path.Ext(rest); ext != "" {
				seen[ext[1:]] = true
			}
		}
	}
	exts := make([]string, 0, len(seen))
	for e := range seen {
		exts = append(exts, e)
	}
	sort.Strings(exts)
	return exts
}

// buildTOML is kernel-builder's description of the package, edition buildEdition: a
// noarch torch kernel whose variants are the backends', with the extensions of its files
// (edition 5's [torch-noarch] takes pyext; kernels-data/src/config/v5.rs TorchNoarch).
func buildTOML(opts Options, pyext []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by %s. A pure-Python Triton kernel: kernel-builder builds it as noarch\n", opts.Tool)
	fmt.Fprintf(&b, "# variants (build/torch-cuda, build/torch-xpu) from torch-ext/%s.\n", ModuleName(opts.Name))
	fmt.Fprintf(&b, "[general]\nname = %q\nversion = %d\nedition = %d\nlicense = %q\nbackends = [",
		opts.Name, opts.Version, buildEdition, opts.License)
	for i, be := range emitBackends {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", be)
	}
	b.WriteString("]\n")
	if opts.RepoID != "" {
		fmt.Fprintf(&b, "\n[general.hub]\nrepo-id = %q\n", opts.RepoID)
	}
	b.WriteString("\n[torch-noarch]\npyext = [")
	for i, e := range pyext {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", e)
	}
	b.WriteString("]\n")
	return b.Bytes()
}

// Card renders the package's README.md: front matter for the Hub, what the package
// replaces and how to use it. Write writes it; push renders it again when the published
// card must name another source model than the plan's local folder.
func Card(pl *plan.Plan, opts Options) []byte {
	var b bytes.Buffer
	b.WriteString("---\nlibrary_name: kernels\n")
	fmt.Fprintf(&b, "license: %s\n", opts.License)
	b.WriteString("tags:\n- kernels\n- triton\n- xpu\n- xpuinject\n")
	if pl.Source.Repo != "" {
		fmt.Fprintf(&b, "base_model: %s\n", pl.Source.Repo)
	}
	b.WriteString("---\n\n")
	model := cmp.Or(opts.Model, pl.Source.Repo, pl.Source.Path, pl.Arch)
	fmt.Fprintf(&b, "# %s\n\n", opts.Name)
	fmt.Fprintf(&b, "Triton kernels for `%s` (%s), generated by %s. One Triton source runs on Intel XPU "+
		"(`build/torch-xpu`) and NVIDIA GPUs (`build/torch-cuda`).\n\n", model, pl.Arch, opts.Tool)
	if pl.Source.Revision != "" {
		fmt.Fprintf(&b, "Source revision: `%s`.\n\n", pl.Source.Revision)
	}
	// Layers provided, with the modules they replace.
	type row struct {
		layer, kernel string
		classes       map[string]bool
		n             int
	}
	rows := map[string]*row{}
	for _, l := range pl.Layers {
		if l.Layer == "" {
			continue
		}
		r := rows[l.Layer]
		if r == nil {
			r = &row{layer: l.Layer, kernel: l.Kernel, classes: map[string]bool{}}
			rows[l.Layer] = r
		}
		r.classes[l.Class] = true
		r.n++
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	b.WriteString("## Layers\n\n| layer | kernel | replaces | modules |\n| --- | --- | --- | --- |\n")
	for _, n := range names {
		r := rows[n]
		var cls []string
		for c := range r.classes {
			cls = append(cls, "`"+c+"`")
		}
		sort.Strings(cls)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %d |\n", r.layer, r.kernel, strings.Join(cls, ", "), r.n)
	}
	fmt.Fprintf(&b, "\n%s. Why each module is where it is: `plan.yaml`. The model runs in %s.\n\n", pl.Counts(), pl.DType)
	repo := cmp.Or(opts.RepoID, "ORG/"+opts.Name)
	packed := cmp.Or(opts.PackedRepoID, PackedRepoID(repo))
	b.WriteString("## Usage\n\n")
	b.WriteString(UsageSnippet(pl, Usage{ModelClass: opts.ModelClass, KernelRepo: repo, Version: opts.Version, PackedRepo: packed}))
	fmt.Fprintf(&b, "\nThe package carries its plan (`plan.yaml`, in each variant folder too) and carries it out: "+
		"`inject` binds each module the plan names to the layer it names. With `packed=` it loads the weights "+
		"xpuinject pre-packed offline (BatchNorm folded, QKV and gate/up concatenated, in the plan's dtype, K-major) from "+
		"[`%s`](https://huggingface.co/%s) and releases the original projections; without it the layers pack "+
		"the model's own weights on first use. `xpuinject.kernelize(model)` needs no plan: it binds every "+
		"supported module of any Llama, Mistral, Qwen2, Qwen3 or LeViT model.\n", packed, packed)
	return b.Bytes()
}
