package emit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/outdir"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
)

func emitTestPlan() *plan.Plan {
	return &plan.Plan{
		Schema: plan.SchemaVersion, Tool: "xpuinject test", Arch: "llama",
		Source:   plan.Source{Repo: "org/Tiny-Llama.v2", Revision: "0123456789abcdef0123456789abcdef01234567"},
		Backends: []string{"cuda", "xpu"}, DType: plan.DTypeBF16, GPU: "h200",
		Layers: []plan.LayerPlan{
			{Module: "model.layers.0.input_layernorm", Kind: "rmsnorm", Class: "LlamaRMSNorm", Kernel: "rmsnorm", Layer: "RMSNorm"},
			{Module: "model.layers.0.mlp", Kind: "mlp-swiglu", Class: "LlamaMLP", Kernel: "gemm", Layer: "SwiGLUMLP"},
			{Module: "model.embed_tokens", Kind: "embedding", Class: "Embedding", Kernel: plan.KernelKeep, Reason: "a gather"},
		},
	}
}

func TestKernelName(t *testing.T) {
	for in, want := range map[string]string{
		"meta-llama/Llama-3.2-1B":  "xpuinject-llama-3-2-1b",
		"facebook/levit-128S@main": "xpuinject-levit-128s",
		"/tmp/fixtures/llama-tiny": "xpuinject-llama-tiny",
		"Qwen/Qwen2.5-0.5B__":      "xpuinject-qwen2-5-0-5b",
	} {
		got := KernelName(in)
		if got != want {
			t.Errorf("KernelName(%q) = %q, want %q", in, got, want)
		}
		if !hub.KernelNamePattern.MatchString(got) {
			t.Errorf("KernelName(%q) = %q is not a valid kernel name", in, got)
		}
	}
}

func TestEmitTreeComplete(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pkg")
	res, err := Write(context.Background(), emitTestPlan(), out, Options{Tool: "xpuinject test", RepoID: "org/tiny-kernels", ModelClass: "LlamaForCausalLM",
		Extra: map[string][]byte{"NOTICE": []byte("extra\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "xpuinject-tiny-llama-v2" {
		t.Errorf("name %q", res.Name)
	}
	module := ModuleName(res.Name)
	want := []string{"README.md", "build.toml", "plan.yaml", "NOTICE", outdir.MarkerFile}
	// the plan travels with the sources: get_kernel fetches one variant folder only
	for _, f := range append(kernels.SourceFiles(), "plan.yaml") {
		want = append(want, "build/torch-cuda/"+f, "build/torch-xpu/"+f, "torch-ext/"+module+"/"+f)
	}
	want = append(want, "build/torch-cuda/metadata.json", "build/torch-xpu/metadata.json")
	have := map[string]bool{}
	filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, p)
			have[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	for _, w := range want {
		if !have[w] {
			t.Errorf("missing %s", w)
		}
		delete(have, w)
	}
	for extra := range have {
		t.Errorf("unexpected file %s", extra)
	}
	for _, be := range []string{"cuda", "xpu"} {
		b, err := os.ReadFile(filepath.Join(out, "build", "torch-"+be, "metadata.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Name, ID, License string
			Version           int
			MinVer            string   `json:"kernels-minver"`
			PythonDepends     []string `json:"python-depends"`
			KernelDepends     []string `json:"kernel-depends"`
			Backend           struct{ Type string }
			Digest            struct {
				Algorithm string
				Files     map[string]string
			}
			XPUInject struct {
				PlanSHA256 string `json:"plan_sha256"`
			} `json:"xpuinject"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Name != res.Name || m.Version != 1 || m.Backend.Type != be || m.PythonDepends == nil || m.KernelDepends == nil ||
			!strings.HasPrefix(m.ID, "_"+module+"_"+be+"_") || m.License != "apache-2.0" || m.MinVer != "0.14.0" {
			t.Errorf("%s metadata: %+v", be, m)
		}
		// the digest: every other file of the variant, base64 sha256 by path (the kernels
		// library's Digest::hash_variant; tests/hub/test_package_roundtrip.py checks it with kernels)
		variant := filepath.Join(out, "build", "torch-"+be)
		want := map[string]string{}
		filepath.WalkDir(variant, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() != "metadata.json" {
				rel, _ := filepath.Rel(variant, p)
				c, _ := os.ReadFile(p)
				sum := sha256.Sum256(c)
				want[filepath.ToSlash(rel)] = base64.StdEncoding.EncodeToString(sum[:])
			}
			return nil
		})
		if m.Digest.Algorithm != "sha256" || !reflect.DeepEqual(m.Digest.Files, want) || want["gpus/h200.json"] == "" {
			t.Errorf("%s digest %+v, want sha256 of %d files", be, m.Digest, len(want))
		}
		py, _ := os.ReadFile(filepath.Join(out, "plan.yaml"))
		if sum := sha256.Sum256(py); m.XPUInject.PlanSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s metadata: plan_sha256 %q, sha256 of plan.yaml is %x", be, m.XPUInject.PlanSHA256, sum)
		}
	}
	planYAML, _ := os.ReadFile(filepath.Join(out, "plan.yaml"))
	for _, v := range []string{"build/torch-cuda", "build/torch-xpu", "torch-ext/" + module} {
		if b, _ := os.ReadFile(filepath.Join(out, v, "plan.yaml")); string(b) != string(planYAML) {
			t.Errorf("%s/plan.yaml differs from plan.yaml", v)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(out, "README.md"))
	for _, s := range []string{"---\nlibrary_name: kernels\n", "license: apache-2.0", "base_model: org/Tiny-Llama.v2",
		"| `RMSNorm` | rmsnorm | `LlamaRMSNorm` | 1 |", "3 modules: 2 on our kernels, 1 kept; 0 layer bindings; packs 0 tensors. Why each module is where it is: `plan.yaml`. The model runs in bf16.",
		"from transformers import LlamaForCausalLM\n\nmodel = LlamaForCausalLM.from_pretrained(\"org/Tiny-Llama.v2\", " +
			"revision=\"0123456789abcdef0123456789abcdef01234567\", dtype=torch.bfloat16).to(\"cuda\").eval()",
		"xpuinject = get_kernel(\"org/tiny-kernels\", version=1, trust_remote_code=True)\n",
		"xpuinject.inject(model, packed=\"org/tiny-kernels-packed\")\n"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("card lacks %q:\n%s", s, readme)
		}
	}
	if strings.Contains(string(readme), "shim") {
		t.Errorf("card mentions a shim:\n%s", readme)
	}
	toml, _ := os.ReadFile(filepath.Join(out, "build.toml"))
	if !strings.Contains(string(toml), "[torch-noarch]") || !strings.Contains(string(toml), `backends = ["cuda", "xpu"]`) ||
		!strings.Contains(string(toml), "\nedition = 5\n") {
		t.Errorf("build.toml:\n%s", toml)
	}
	// kernel-builder copies only torch-ext files whose extension pyext lists: every file of
	// the package's sources must be one (contract.json, plan.yaml and gpus/*.json are data).
	if !strings.Contains(string(toml), "\n[torch-noarch]\npyext = [\"json\", \"py\", \"yaml\"]\n") {
		t.Errorf("build.toml lacks pyext for the data files:\n%s", toml)
	}
	var data []string
	filepath.WalkDir(filepath.Join(out, "torch-ext"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if ext := filepath.Ext(p); !slices.Contains([]string{".json", ".py", ".yaml"}, ext) {
				t.Errorf("torch-ext file %s: extension %q is not in pyext", p, ext)
			} else if ext != ".py" {
				data = append(data, filepath.Base(p))
			}
		}
		return nil
	})
	if slices.Sort(data); !slices.Equal(data, []string{"contract.json", "h100.json", "h200.json", "plan.yaml"}) {
		t.Errorf("torch-ext data files %v", data)
	}
}

func TestEmitRefusesNonEmptyWithoutForce(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "pkg")
	if _, err := Write(context.Background(), emitTestPlan(), out, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(context.Background(), emitTestPlan(), out, Options{}); !errors.Is(err, outdir.ErrExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("want an earlier-output error naming --force, got %v", err)
	}
	if _, err := Write(context.Background(), emitTestPlan(), out, Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	// a folder of someone else's files: never replaced, --force or not
	user := filepath.Join(dir, "user")
	os.MkdirAll(user, 0o755)
	os.WriteFile(filepath.Join(user, "keep.txt"), []byte("user data"), 0o644)
	for _, force := range []bool{false, true} {
		if _, err := Write(context.Background(), emitTestPlan(), user, Options{Force: force}); !errors.Is(err, outdir.ErrRefused) {
			t.Fatalf("force=%v over a user folder: %v", force, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(user, "keep.txt")); string(b) != "user data" {
		t.Fatal("existing file was touched")
	}
	// a regular file: refused, unchanged
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := Write(context.Background(), emitTestPlan(), file, Options{Force: true}); !errors.Is(err, outdir.ErrRefused) {
		t.Fatalf("over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Fatal("the file was replaced")
	}
	// no temporary folders left beside it
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Fatalf("leftovers beside the package: %v", ents)
	}
}

func TestEmitRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(context.Background(), emitTestPlan(), filepath.Join(dir, "a"), Options{Name: "Bad_Name"}); err == nil {
		t.Error("bad kernel name accepted")
	}
	if _, err := Write(context.Background(), emitTestPlan(), filepath.Join(dir, "b"), Options{Extra: map[string][]byte{"../escape.py": nil}}); err == nil {
		t.Error("extra file outside the package accepted")
	}
	if _, err := Write(context.Background(), nil, filepath.Join(dir, "c"), Options{}); err == nil {
		t.Error("nil plan accepted")
	}
	// nothing half-written
	for _, n := range []string{"a", "b", "c"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("%s was created by a failed emit", n)
		}
	}
}

// TestEmitInterrupted: a cancel during the write stops it at the next file; the earlier
// package is unchanged and nothing is left beside it.
func TestEmitInterrupted(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "pkg")
	first, err := Write(context.Background(), emitTestPlan(), out, Options{Name: "first-kernel"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	written := 0
	restore := outdir.SetFault(func(op, path string) error {
		if op == "write" && strings.Contains(path, ".xpuinject-") {
			if written++; written == 3 {
				cancel() // as a signal arriving while the third file is written
			}
		}
		return nil
	})
	defer restore()
	_, err = Write(ctx, emitTestPlan(), out, Options{Name: "second-kernel", Force: true})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted before") {
		t.Fatalf("error %v, want an interruption", err)
	}
	if written != 3 {
		t.Errorf("%d files written after the cancel, want none past the third", written)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "pkg" {
		t.Errorf("beside the package: %v", ents)
	}
	b, err := os.ReadFile(filepath.Join(out, "build", "torch-cuda", "metadata.json"))
	if err != nil || !strings.Contains(string(b), `"first-kernel"`) {
		t.Errorf("the earlier package (%d files) was changed: %s %v", len(first.Files), b, err)
	}
}
