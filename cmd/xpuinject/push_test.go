package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub/hubtest"
)

// pushTestPkg writes a hand-made kernel-hub package (one variant plus the card).
func pushTestPkg(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"README.md":                     "---\nlibrary_name: kernels\nbase_model: org/tiny-llama\n---\n# k\n",
		"build/torch-xpu/__init__.py":   "from . import layers\n",
		"build/torch-xpu/layers.py":     "import torch\n\n\nclass RMSNorm(torch.nn.Module):\n    pass\n",
		"build/torch-xpu/metadata.json": `{"name": "tiny-kernels", "id": "tiny_kernels", "version": 1, "license": "mit", "python-depends": [], "backend": {"type": "xpu"}}`,
	}
	for p, c := range files {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tinySource names the Hub model of the llama-tiny fixture, for cards of packages planned
// from its folder.
var tinySource = []string{"--source-repo-id", "tiny-org/llama-tiny@0123456789abcdef0123456789abcdef01234567"}

func runPush(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, Getenv: func(k string) string { return env[k] }}
	code = Main(append([]string{"push"}, args...), f)
	return code, out.String(), errOut.String()
}

func TestPushCommandDryRun(t *testing.T) {
	dir := pushTestPkg(t)
	env := map[string]string{"HF_ENDPOINT": "http://127.0.0.1:1", "HF_HOME": t.TempDir()} // nothing listens there
	code, out, errOut := runPush(t, env, dir, "--repo-id", "my-org/tiny-kernels", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `create repo kernel my-org/tiny-kernels (public; an existing repo is kept)
create branch v1 from main (an existing branch is kept)
upload mode build/torch-xpu/__init__.py regular (predicted)
upload mode build/torch-xpu/layers.py regular (predicted)
upload mode build/torch-xpu/metadata.json regular (predicted)
add v1 build/torch-xpu/__init__.py (21 bytes)
add v1 build/torch-xpu/layers.py (56 bytes)
add v1 build/torch-xpu/metadata.json (128 bytes)
delete v1 build/** files that this package does not have (listed from v1 when pushing)
commit v1 "xpuinject ` + Version + `: tiny-kernels v1 for org/tiny-llama"
upload mode README.md regular (predicted)
add main README.md (61 bytes)
commit main "xpuinject ` + Version + `: card of tiny-kernels v1 for org/tiny-llama"
`
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if errOut != "push: no packed weights with this package's plan beside "+dir+" (pass --packed DIR): only the kernel repository is published\n"+
		"dry run: nothing was sent to http://127.0.0.1:1\n" {
		t.Errorf("stderr %q", errOut)
	}
}

func TestPushCommandPublishes(t *testing.T) {
	srv := hubtest.New(nil)
	srv.Token = "hf_cmdTestToken"
	ts := srv.Start()
	defer ts.Close()
	env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_TOKEN": "hf_cmdTestToken", "HF_HOME": t.TempDir()}
	code, out, errOut := runPush(t, env, pushTestPkg(t), "--repo-id", "my-org/tiny-kernels", "--private")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, v1, err := srv.Store.Resolve("kernel", "my-org/tiny-kernels", "v1")
	if err != nil || len(v1.Files) != 3 {
		t.Fatalf("v1: %v %v", v1, err)
	}
	_, main, _ := srv.Store.Resolve("kernel", "my-org/tiny-kernels", "main")
	want := fmt.Sprintf("published my-org/tiny-kernels v1: 4 added, 0 deleted, 0 unchanged (0 through LFS)\nv1 commit %s\nmain commit %s\n%s/kernels/my-org/tiny-kernels/tree/v1\n", v1.SHA, main.SHA, ts.URL)
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if !srv.Store.Repo("kernel", "my-org/tiny-kernels").Private {
		t.Errorf("--private ignored")
	}
	if strings.Contains(out+errOut, "hf_cmdTestToken") {
		t.Errorf("token printed")
	}
	if v := srv.Violations(); len(v) > 0 {
		t.Errorf("violations %v", v)
	}
	// Again: nothing to do.
	code, out, _ = runPush(t, env, pushTestPkg(t), "--repo-id", "my-org/tiny-kernels")
	if code != 0 || out != "my-org/tiny-kernels v1: already up to date, nothing committed\n"+ts.URL+"/kernels/my-org/tiny-kernels/tree/v1\n" {
		t.Errorf("second push: exit %d %q", code, out)
	}
}

func TestPushCommandErrors(t *testing.T) {
	srv := hubtest.New(nil)
	srv.Token = "hf_right"
	ts := srv.Start()
	defer ts.Close()
	pkg := pushTestPkg(t)
	notPkg := t.TempDir()
	os.WriteFile(filepath.Join(notPkg, "README.md"), []byte("# hi\n"), 0o644)
	env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_TOKEN": "hf_wrong", "HF_HOME": t.TempDir()}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no repo id", []string{pkg}, exitUsage, "--repo-id ORG/NAME is required"},
		{"no dir", []string{"--repo-id", "a/b"}, exitUsage, "push: missing DIR: a run folder"},
		{"negative version", []string{pkg, "--repo-id", "a/b", "--version", "-1"}, exitUsage, "--version -1"},
		{"not a package", []string{notPkg, "--repo-id", "a/b"}, exitError1, "not a kernel-hub package: " + notPkg + " has no build/ folder"},
		{"bad repo id", []string{pkg, "--repo-id", "a/b@v1"}, exitUsage, `--repo-id "a/b@v1": want ORG/NAME`},
		{"repo id without org", []string{pkg, "--repo-id", "notvalid"}, exitUsage, `--repo-id "notvalid": want ORG/NAME`},
		{"wrong token", []string{pkg, "--repo-id", "a/b"}, exitError1, "HTTP 401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runPush(t, env, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.code, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q on failure", out)
			}
			if strings.Contains(errOut, "hf_wrong") {
				t.Errorf("token printed")
			}
		})
	}
	if srv.Store.Repo("kernel", "a/b") != nil {
		t.Errorf("a failed push created the repo")
	}
}

func TestPushCommandJSON(t *testing.T) {
	srv := hubtest.New(nil)
	srv.Token = "hf_jsonTok"
	ts := srv.Start()
	defer ts.Close()
	env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_TOKEN": "hf_jsonTok", "HF_HOME": t.TempDir()}
	code, out, errOut := runPush(t, env, pushTestPkg(t), "--repo-id", "my-org/tiny-kernels", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	type result struct {
		RepoID, Branch, URL       string
		BuildCommit               string `json:"build_commit"`
		CardCommit                string `json:"card_commit"`
		RepoCreated               bool   `json:"repo_created"`
		Added, Deleted, Unchanged []string
		DryRun                    bool `json:"dry_run"`
		Operations                []string
	}
	var both struct {
		Kernel result
		Packed *result
	}
	if err := json.Unmarshal([]byte(out), &both); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	res := both.Kernel
	if both.Packed != nil {
		t.Errorf("a package without packed weights published some: %+v", both.Packed)
	}
	_, v1, _ := srv.Store.Resolve("kernel", "my-org/tiny-kernels", "v1")
	if res.Branch != "v1" || res.BuildCommit != v1.SHA || res.CardCommit == "" || !res.RepoCreated || len(res.Added) != 4 || res.DryRun || res.Operations != nil {
		t.Errorf("result %+v", res)
	}
	code, out, _ = runPush(t, env, pushTestPkg(t), "--repo-id", "my-org/other", "--json", "--dry-run")
	if err := json.Unmarshal([]byte(out), &both); code != 0 || err != nil || !both.Kernel.DryRun || len(both.Kernel.Operations) != 13 {
		t.Errorf("dry-run JSON: exit %d err %v %+v", code, err, both)
	}
	if srv.Store.Repo("kernel", "my-org/other") != nil {
		t.Errorf("--json --dry-run created the repo")
	}
}

// runFolder runs the pipeline without eval on a fixture and returns the run folder
// (package/, packed/).
func runFolder(t *testing.T, fixture string, extra ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	if code, _, errOut := runCLI(t, nil, append([]string{filepath.Join(fixtures, fixture), "--out", out, "--skip-eval"}, extra...)...); code != 0 {
		t.Fatalf("pipeline %s: exit %d: %s", fixture, code, errOut)
	}
	return out
}

// A run folder publishes both repositories: the kernel package, and the packed weights
// with the plan, the source model's config/tokenizer files and a card saying how to use them.
func TestPushPublishesPackedWeights(t *testing.T) {
	run := runFolder(t, "llama-tiny")
	srv := hubtest.New(nil)
	srv.Token = "hf_packTok"
	ts := srv.Start()
	defer ts.Close()
	env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_TOKEN": "hf_packTok", "HF_HOME": t.TempDir()}

	// Planned from a local folder: the cards would name its path, so push asks for the Hub id.
	code, out, errOut := runPush(t, env, run, "--repo-id", "my-org/tiny-kernels", "--dry-run")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "planned from a local folder") ||
		!strings.Contains(errOut, "pass --source-repo-id ORG/NAME[@REVISION]") {
		t.Fatalf("no --source-repo-id: exit %d stdout %q stderr %q", code, out, errOut)
	}
	code, out, errOut = runPush(t, env, append([]string{run, "--repo-id", "my-org/tiny-kernels", "--dry-run"}, tinySource...)...)
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"create repo kernel my-org/tiny-kernels (public; an existing repo is kept)",
		"create repo model my-org/tiny-kernels-packed (public; an existing repo is kept)",
		"upload mode model.safetensors lfs (predicted)",
		"add main plan.yaml (", "add main config.json (", "add main tokenizer.json (", "add main generation_config.json (",
		"add main README.md (", "delete main files that this upload does not have, but .gitattributes (listed from main when pushing)",
	} {
		if !strings.Contains(out, want+"") {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if srv.Store.Repo("model", "my-org/tiny-kernels-packed") != nil || srv.Store.Repo("kernel", "my-org/tiny-kernels") != nil {
		t.Fatal("a dry run created a repository")
	}

	code, out, errOut = runPush(t, env, append([]string{run, "--repo-id", "my-org/tiny-kernels"}, tinySource...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, main, err := srv.Store.Resolve("model", "my-org/tiny-kernels-packed", "main")
	if err != nil {
		t.Fatalf("packed repo: %v\n%s", err, out)
	}
	var names []string
	for n := range main.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"README.md", "config.json", "generation_config.json", "model.safetensors", "plan.yaml", "tokenizer.json", "tokenizer_config.json"}; !slices.Equal(names, want) {
		t.Errorf("packed repo files %v, want %v", names, want)
	}
	for _, n := range []string{"model.safetensors", "plan.yaml"} {
		disk, _ := os.ReadFile(filepath.Join(run, "packed", n))
		if string(main.Files[n].Data) != string(disk) {
			t.Errorf("%s differs from the packed folder's", n)
		}
	}
	if !main.Files["model.safetensors"].LFS {
		t.Error("model.safetensors not stored through LFS")
	}
	src, _ := os.ReadFile(filepath.Join(fixtures, "llama-tiny", "config.json"))
	if string(main.Files["config.json"].Data) != string(src) {
		t.Error("config.json is not the source model's")
	}
	card := string(main.Files["README.md"].Data)
	abs, _ := filepath.Abs(filepath.Join(fixtures, "llama-tiny"))
	load := `from_pretrained("tiny-org/llama-tiny", revision="0123456789abcdef0123456789abcdef01234567", dtype=torch.bfloat16)`
	for _, want := range []string{
		"base_model: tiny-org/llama-tiny\n",
		"model = LlamaForCausalLM." + load,
		`xpuinject = get_kernel("my-org/tiny-kernels", version=1, trust_remote_code=True)`,
		`xpuinject.inject(model, packed="my-org/tiny-kernels-packed")`,
		"The weights of `tiny-org/llama-tiny`",
	} {
		if !strings.Contains(card, want) {
			t.Errorf("card lacks %q:\n%s", want, card)
		}
	}
	// the kernel repo's card (main) names the Hub model too, never the local folder
	_, kmain, err := srv.Store.Resolve("kernel", "my-org/tiny-kernels", "main")
	if err != nil {
		t.Fatal(err)
	}
	kcard := string(kmain.Files["README.md"].Data)
	for _, c := range []string{card, kcard} {
		if strings.Contains(c, abs) {
			t.Errorf("a published card names the local folder %s:\n%s", abs, c)
		}
	}
	for _, want := range []string{"base_model: tiny-org/llama-tiny\n", "model = LlamaForCausalLM." + load,
		`xpuinject = get_kernel("my-org/tiny-kernels", version=1, trust_remote_code=True)`} {
		if !strings.Contains(kcard, want) {
			t.Errorf("kernel card lacks %q:\n%s", want, kcard)
		}
	}
	if strings.Contains(card, "## Evaluation") {
		t.Errorf("card records an eval that did not run:\n%s", card)
	}
	if !strings.HasPrefix(out, "published my-org/tiny-kernels v1: ") ||
		!strings.Contains(out, "\npublished my-org/tiny-kernels-packed main: 7 added, 0 deleted, 0 unchanged (1 through LFS)\nmain commit "+main.SHA+"\n"+ts.URL+"/my-org/tiny-kernels-packed\n") {
		t.Errorf("stdout:\n%s", out)
	}
	if _, v1, err := srv.Store.Resolve("kernel", "my-org/tiny-kernels", "v1"); err != nil || v1.Files["build/torch-cuda/plan.yaml"].Data == nil {
		t.Errorf("kernel repo v1 lacks the variant's plan: %v", err)
	}
	if v := srv.Violations(); len(v) > 0 {
		t.Errorf("violations %v", v)
	}

	// A stale file on the packed repo goes; an unchanged file is not sent again.
	if _, err := srv.Store.Apply("model", "my-org/tiny-kernels-packed", "main", "extra", map[string]hubtest.File{"old.bin": {Data: []byte("x")}}, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runPush(t, env, append([]string{filepath.Join(run, "package"), "--repo-id", "my-org/tiny-kernels",
		"--packed-repo-id", "my-org/weights", "--json"}, tinySource...)...)
	if code != 0 {
		t.Fatalf("package folder with ../packed: exit %d: %s", code, errOut)
	}
	if srv.Store.Repo("model", "my-org/weights") == nil || !strings.Contains(out, `"packed": {`) {
		t.Errorf("--packed-repo-id ignored or ../packed not found:\n%s", out)
	}
	code, _, errOut = runPush(t, env, append([]string{run, "--repo-id", "my-org/tiny-kernels"}, tinySource...)...)
	_, main, _ = srv.Store.Resolve("model", "my-org/tiny-kernels-packed", "main")
	if _, stale := main.Files["old.bin"]; code != 0 || stale {
		t.Errorf("second push: exit %d, old.bin still there: %v (%s)", code, stale, errOut)
	}
}

func TestPushPackedErrors(t *testing.T) {
	a, b := runFolder(t, "llama-tiny"), runFolder(t, "llama-tiny", "--disable", "add-rmsnorm")
	env := map[string]string{"HF_ENDPOINT": "http://127.0.0.1:1", "HF_HOME": t.TempDir()}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"packed of another plan", []string{a, "--packed", filepath.Join(b, "packed"), "--repo-id", "o/k", "--dry-run"}, exitError1,
			"its plan.yaml is not the package's"},
		{"same repo twice", []string{a, "--repo-id", "o/k", "--packed-repo-id", "o/k"}, exitUsage, "need a repository of their own"},
		{"source gone", []string{a, "--repo-id", "o/k", "--source", t.TempDir(), "--dry-run"}, exitError1, "has no config.json"},
		{"eval not json", []string{a, "--repo-id", "o/k", "--eval", filepath.Join(a, "packed", "plan.yaml"), "--dry-run"}, exitError1, "--eval: harness:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runPush(t, env, append(tc.args, tinySource...)...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

// --eval records the eval's summary in the packed card: accuracy ratios and latency ratios.
func TestPushRecordsTheEval(t *testing.T) {
	run := runFolder(t, "llama-tiny")
	srv := hubtest.New(nil)
	srv.Token = "hf_evalTok"
	ts := srv.Start()
	defer ts.Close()
	env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_TOKEN": "hf_evalTok", "HF_HOME": t.TempDir()}
	code, _, errOut := runPush(t, env, append([]string{run, "--repo-id", "o/k", "--eval", "../../harness/testdata/eval-gpu.json"},
		tinySource...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	_, main, _ := srv.Store.Resolve("model", "o/k-packed", "main")
	card := string(main.Files["README.md"].Data)
	for _, want := range []string{"## Evaluation of the run that packed these weights (NVIDIA H200)", "| metric | injected | stock bf16 | ratio |",
		"| mean_abs |", "| prefill 128 tokens, batch 1 (injected graph / stock compiled) | 0.8 |",
		"| decode, batch 1, context 512 (injected graph / stock compiled) | 1 |"} {
		if !strings.Contains(card, want) {
			t.Errorf("card lacks %q:\n%s", want, card)
		}
	}
}
