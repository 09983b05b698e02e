package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	if errOut != "dry run: nothing was sent to http://127.0.0.1:1\n" {
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
		{"no dir", []string{"--repo-id", "a/b"}, exitUsage, "accepts 1 arg"},
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
	var res struct {
		RepoID, Branch, URL       string
		BuildCommit               string `json:"build_commit"`
		CardCommit                string `json:"card_commit"`
		RepoCreated               bool   `json:"repo_created"`
		Added, Deleted, Unchanged []string
		DryRun                    bool `json:"dry_run"`
		Operations                []string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	_, v1, _ := srv.Store.Resolve("kernel", "my-org/tiny-kernels", "v1")
	if res.Branch != "v1" || res.BuildCommit != v1.SHA || res.CardCommit == "" || !res.RepoCreated || len(res.Added) != 4 || res.DryRun || res.Operations != nil {
		t.Errorf("result %+v", res)
	}
	code, out, _ = runPush(t, env, pushTestPkg(t), "--repo-id", "my-org/other", "--json", "--dry-run")
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !res.DryRun || len(res.Operations) != 13 {
		t.Errorf("dry-run JSON: exit %d err %v %+v", code, err, res)
	}
	if srv.Store.Repo("kernel", "my-org/other") != nil {
		t.Errorf("--json --dry-run created the repo")
	}
}
