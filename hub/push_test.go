package hub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/hub/hubtest"
)

const (
	pushToken = "hf_pushTestSecretToken0123456789"
	pushRepo  = "kernels-test/tiny-kernels"
)

// pushPkgFiles is a hand-made kernel-hub package (the package writer belongs to
// another part): two noarch variants with __init__.py exposing layers, layers.py,
// metadata.json, a binary table (LFS by content) and the card.
func pushPkgFiles(version string) map[string]string {
	meta := `{"name": "tiny-kernels", "id": "tiny_kernels", "version": ` + version + `, "license": "apache-2.0", "python-depends": [], "backend": {"type": "%s"}}`
	files := map[string]string{
		"README.md": "---\nlibrary_name: kernels\nlicense: apache-2.0\nbase_model: org/tiny-llama\n---\n\n# tiny-kernels\n\nRMSNorm for org/tiny-llama.\n",
	}
	for _, b := range []string{"cuda", "xpu"} {
		v := "build/torch-" + b + "/"
		files[v+"__init__.py"] = "from . import layers\n\n__all__ = [\"layers\"]\n"
		files[v+"layers.py"] = "import torch\n\n\nclass RMSNorm(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
		files[v+"metadata.json"] = fmt.Sprintf(meta, b)
	}
	files["build/torch-cuda/table.bin"] = "\x00\x01\x02binary" + strings.Repeat("\x07", 100)
	return files
}

func pushWritePkg(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type pushEnv struct {
	srv    *hubtest.Server
	url    string
	client *hub.Client
	log    *bytes.Buffer
}

func newPushEnv(t *testing.T) *pushEnv {
	t.Helper()
	srv := hubtest.New(nil)
	srv.Token = pushToken
	ts := srv.Start()
	t.Cleanup(ts.Close)
	home := t.TempDir()
	env := map[string]string{"HF_ENDPOINT": ts.URL, "HF_TOKEN": pushToken, "HF_HOME": home}
	c := hub.NewClient(func(k string) string { return env[k] })
	c.MaxRetries = 3
	c.Backoff = func(int) time.Duration { return time.Millisecond }
	return &pushEnv{srv: srv, url: ts.URL, client: c, log: &bytes.Buffer{}}
}

func (e *pushEnv) push(t *testing.T, dir string, opts hub.PushOptions) (*hub.PushResult, error) {
	t.Helper()
	if opts.RepoID == "" {
		opts.RepoID = pushRepo
	}
	opts.ToolVersion = "0.1.0"
	opts.Progress = e.log
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := hub.Push(ctx, e.client, dir, opts)
	if strings.Contains(e.log.String(), pushToken) {
		t.Errorf("progress output contains the token")
	}
	if err != nil && strings.Contains(err.Error(), pushToken) {
		t.Errorf("error contains the token: %v", err)
	}
	return res, err
}

// files returns a branch's files as path → content.
func (e *pushEnv) files(t *testing.T, branch string) map[string]string {
	t.Helper()
	_, c, err := e.srv.Store.Resolve("kernel", pushRepo, branch)
	if err != nil {
		t.Fatalf("resolve %s: %v", branch, err)
	}
	out := map[string]string{}
	for p, f := range c.Files {
		out[p] = string(f.Data)
	}
	return out
}

func (e *pushEnv) routes() []string {
	var out []string
	for _, r := range e.srv.PublishLog() {
		out = append(out, fmt.Sprintf("%s %d", r.Route, r.Status))
	}
	return out
}

func (e *pushEnv) noViolations(t *testing.T) {
	t.Helper()
	if v := e.srv.Violations(); len(v) > 0 {
		t.Errorf("protocol violations:\n%s", strings.Join(v, "\n"))
	}
}

func buildOnly(files map[string]string) map[string]string {
	out := map[string]string{}
	for p, c := range files {
		if strings.HasPrefix(p, "build/") {
			out[p] = c
		}
	}
	return out
}

func equalMaps(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var gk, wk []string
	for k := range got {
		gk = append(gk, k)
	}
	for k := range want {
		wk = append(wk, k)
	}
	sort.Strings(gk)
	sort.Strings(wk)
	if strings.Join(gk, "\n") != strings.Join(wk, "\n") {
		t.Fatalf("%s: paths\n%v\nwant\n%v", what, gk, wk)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], want[k])
		}
	}
}

func TestPushNewRepo(t *testing.T) {
	e := newPushEnv(t)
	pkg := pushPkgFiles("1")
	dir := pushWritePkg(t, pkg)
	res, err := e.push(t, dir, hub.PushOptions{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	e.noViolations(t)
	if !res.RepoCreated || !res.BranchCreated || res.Branch != "v1" || res.BuildCommit == "" || res.CardCommit == "" {
		t.Fatalf("result %+v", res)
	}
	if want := e.url + "/kernels/" + pushRepo + "/tree/v1"; res.URL != want {
		t.Errorf("URL %q, want %q", res.URL, want)
	}
	repo := e.srv.Store.Repo("kernel", pushRepo)
	if repo == nil || !repo.Private || repo.Type != "kernel" {
		t.Fatalf("repo %+v: want a private kernel repo", repo)
	}
	equalMaps(t, "v1", e.files(t, "v1"), buildOnly(pkg))
	equalMaps(t, "main", e.files(t, "main"), map[string]string{"README.md": pkg["README.md"]})

	// The binary table went through LFS, the sources did not.
	_, head, _ := e.srv.Store.Resolve("kernel", pushRepo, "v1")
	for p, f := range head.Files {
		if wantLFS := strings.HasSuffix(p, ".bin"); f.LFS != wantLFS {
			t.Errorf("%s: LFS %v, want %v", p, f.LFS, wantLFS)
		}
	}
	if len(res.LFS) != 1 || res.LFS[0] != "build/torch-cuda/table.bin" {
		t.Errorf("LFS paths %v", res.LFS)
	}
	if c := head.Summary; c != "xpuinject 0.1.0: tiny-kernels v1 for org/tiny-llama" {
		t.Errorf("v1 commit summary %q", c)
	}
	_, mainHead, _ := e.srv.Store.Resolve("kernel", pushRepo, "main")
	if c := mainHead.Summary; c != "xpuinject 0.1.0: card of tiny-kernels v1 for org/tiny-llama" {
		t.Errorf("main commit summary %q", c)
	}
	want := []string{"create 200", "branch 200", "preupload 200", "lfs-batch 200", "lfs-upload 200", "lfs-verify 200", "commit 200", "preupload 200", "commit 200"}
	if got := e.routes(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("requests\n%v\nwant\n%v", got, want)
	}
	for _, r := range e.srv.PublishLog() {
		if (r.Route == hubtest.PubLFSUpload) == r.Authorized {
			t.Errorf("%s %s: Authorization sent %v (storage must get none, the Hub always)", r.Method, r.Path, r.Authorized)
		}
	}

	// The download side serves what was committed (private: with the token).
	for _, p := range []string{"build/torch-xpu/layers.py", "build/torch-cuda/table.bin"} {
		req, _ := http.NewRequest("GET", e.url+"/kernels/"+pushRepo+"/resolve/v1/"+p, nil)
		req.Header.Set("Authorization", "Bearer "+pushToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != pkg[p] {
			t.Errorf("resolve %s: HTTP %d %q, want %q", p, resp.StatusCode, b, pkg[p])
		}
	}
}

func TestPushUpdateDeletesStaleBuildFilesOnly(t *testing.T) {
	e := newPushEnv(t)
	pkg := pushPkgFiles("1")
	// The branch already holds an older package: a stale module, a dropped variant,
	// a file outside build/ (kept), and an unchanged layers.py.
	e.srv.Store.CreateRepo("kernel", pushRepo, false)
	e.srv.Store.Put("kernel", pushRepo, "v1", map[string]hubtest.File{
		"build/torch-cuda/layers.py":   {Data: []byte(pkg["build/torch-cuda/layers.py"])},
		"build/torch-cuda/old_norm.py": {Data: []byte("old")},
		"build/torch-rocm/layers.py":   {Data: []byte("rocm")},
		"benchmarks/benchmark_x.py":    {Data: []byte("keep me")},
	})
	e.srv.Store.Put("kernel", pushRepo, "main", map[string]hubtest.File{"README.md": {Data: []byte(pkg["README.md"])}, "LICENSE": {Data: []byte("L")}})
	mainBefore := e.files(t, "main")

	res, err := e.push(t, pushWritePkg(t, pkg), hub.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.noViolations(t)
	if res.RepoCreated || res.BranchCreated {
		t.Errorf("repo/branch reported created: %+v", res)
	}
	if got := strings.Join(res.Deleted, ","); got != "build/torch-cuda/old_norm.py,build/torch-rocm/layers.py" {
		t.Errorf("deleted %s", got)
	}
	if got := strings.Join(res.Unchanged, ","); got != "build/torch-cuda/layers.py,README.md" {
		t.Errorf("unchanged %s", got)
	}
	want := buildOnly(pkg)
	want["benchmarks/benchmark_x.py"] = "keep me"
	equalMaps(t, "v1", e.files(t, "v1"), want)
	if res.CardCommit != "" {
		t.Errorf("card unchanged, yet committed %s", res.CardCommit)
	}
	equalMaps(t, "main", e.files(t, "main"), mainBefore)
	// 409 on create and on branch were fine; only one commit was made.
	wantRoutes := []string{"create 409", "branch 409", "preupload 200", "lfs-batch 200", "lfs-upload 200", "lfs-verify 200", "commit 200"}
	if got := e.routes(); strings.Join(got, ",") != strings.Join(wantRoutes, ",") {
		t.Errorf("requests\n%v\nwant\n%v", got, wantRoutes)
	}
}

func TestPushTwiceIsANoOp(t *testing.T) {
	e := newPushEnv(t)
	dir := pushWritePkg(t, pushPkgFiles("1"))
	if _, err := e.push(t, dir, hub.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(e.srv.PublishLog())
	res, err := e.push(t, dir, hub.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.BuildCommit != "" || res.CardCommit != "" || len(res.Added) != 0 || len(res.Unchanged) != 8 {
		t.Errorf("second push %+v", res)
	}
	for _, r := range e.srv.PublishLog()[n:] {
		if r.Route != hubtest.PubCreate && r.Route != hubtest.PubBranch {
			t.Errorf("second push sent %s %s", r.Method, r.Path)
		}
	}
}

func TestPushVersionBranch(t *testing.T) {
	for _, tc := range []struct {
		meta    string
		flag    int
		want    string
		wantErr string
	}{
		{meta: "3", want: "v3"},
		{meta: "3", flag: 3, want: "v3"},
		{meta: "null", want: "v1"},
		{meta: "null", flag: 7, want: "v7"},
		{meta: "3", flag: 2, wantErr: "version 2 asked, but build/torch-cuda/metadata.json says version 3"},
	} {
		t.Run(tc.meta+"/"+fmt.Sprint(tc.flag), func(t *testing.T) {
			e := newPushEnv(t)
			res, err := e.push(t, pushWritePkg(t, pushPkgFiles(tc.meta)), hub.PushOptions{Version: tc.flag})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if len(e.srv.PublishLog()) != 0 {
					t.Errorf("requests were sent before the version check")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Branch != tc.want {
				t.Fatalf("branch %s, want %s", res.Branch, tc.want)
			}
			if _, _, err := e.srv.Store.Resolve("kernel", pushRepo, tc.want); err != nil {
				t.Fatal(err)
			}
			e.noViolations(t)
		})
	}
}

func TestPushDryRun(t *testing.T) {
	e := newPushEnv(t)
	e.client.Token = "" // a dry run needs no token
	pkg := pushPkgFiles("2")
	res, err := e.push(t, pushWritePkg(t, pkg), hub.PushOptions{DryRun: true, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create repo kernel kernels-test/tiny-kernels (private; an existing repo is kept)",
		"create branch v2 from main (an existing branch is kept)",
		"upload mode build/torch-cuda/__init__.py regular (predicted)",
		"upload mode build/torch-cuda/layers.py regular (predicted)",
		"upload mode build/torch-cuda/metadata.json regular (predicted)",
		"upload mode build/torch-cuda/table.bin lfs (predicted)",
		"upload mode build/torch-xpu/__init__.py regular (predicted)",
		"upload mode build/torch-xpu/layers.py regular (predicted)",
		"upload mode build/torch-xpu/metadata.json regular (predicted)",
		"add v2 build/torch-cuda/__init__.py (43 bytes)",
		"add v2 build/torch-cuda/layers.py (90 bytes)",
		"add v2 build/torch-cuda/metadata.json (136 bytes)",
		"add v2 build/torch-cuda/table.bin (109 bytes)",
		"add v2 build/torch-xpu/__init__.py (43 bytes)",
		"add v2 build/torch-xpu/layers.py (90 bytes)",
		"add v2 build/torch-xpu/metadata.json (135 bytes)",
		"delete v2 build/** files that this package does not have (listed from v2 when pushing)",
		`commit v2 "xpuinject 0.1.0: tiny-kernels v2 for org/tiny-llama"`,
		"upload mode README.md regular (predicted)",
		"add main README.md (122 bytes)",
		`commit main "xpuinject 0.1.0: card of tiny-kernels v2 for org/tiny-llama"`,
	}
	if got := strings.Join(res.Operations, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("dry run:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	for p, c := range pkg { // the byte counts above are the files'
		if !strings.Contains(strings.Join(res.Operations, "\n"), fmt.Sprintf("%s (%d bytes)", p, len(c))) {
			t.Errorf("dry run does not give %s's size %d", p, len(c))
		}
	}
	if n := len(e.srv.PublishLog()); n != 0 {
		t.Errorf("dry run sent %d publish requests", n)
	}
	if e.srv.Store.Repo("kernel", pushRepo) != nil {
		t.Errorf("dry run created the repo")
	}
	if !strings.Contains(e.log.String(), "dry run: nothing was sent") {
		t.Errorf("progress %q", e.log.String())
	}
}

func TestPushFaults(t *testing.T) {
	type check func(t *testing.T, e *pushEnv, res *hub.PushResult, err error)
	published := func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("push failed: %v", err)
		}
		e.noViolations(t)
		equalMaps(t, "v1", e.files(t, "v1"), buildOnly(pushPkgFiles("1")))
	}
	nothingOnV1 := func(t *testing.T, e *pushEnv) {
		t.Helper()
		if _, c, err := e.srv.Store.Resolve("kernel", pushRepo, "v1"); err == nil && len(c.Files) > 0 {
			t.Errorf("v1 has %d files after a failed push", len(c.Files))
		}
	}
	failed := func(is error, contains ...string) check {
		return func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
			t.Helper()
			if err == nil {
				t.Fatalf("push succeeded: %+v", res)
			}
			if res != nil {
				t.Errorf("a failed push returned a result %+v", res)
			}
			if is != nil && !errors.Is(err, is) {
				t.Errorf("error %v is not %v", err, is)
			}
			for _, c := range contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("error %q does not say %q", err, c)
				}
			}
			nothingOnV1(t, e)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(e *pushEnv)
		check check
	}{
		{"401 wrong token", func(e *pushEnv) { e.client.Token = "hf_wrongTokenValue" },
			failed(hub.ErrUnauthorized, "HTTP 401", "HF_TOKEN", "huggingface-cli login")},
		{"no token", func(e *pushEnv) { e.client.Token = "" },
			func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
				failed(hub.ErrUnauthorized, "no Hub token", "HF_TOKEN", "huggingface-cli login")(t, e, res, err)
				if n := len(e.srv.PublishLog()); n != 0 {
					t.Errorf("%d requests sent without a token", n)
				}
			}},
		{"403 on create", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCreate, Status: 403, Message: "You are not allowed to create kernel repositories"})
		}, failed(hub.ErrForbidden, "HTTP 403", "You are not allowed to create kernel repositories",
			"kernels-community/README/discussions/new", `write access to "kernels-test"`)},
		{"403 on commit", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Status: 403, Message: "read-only token"})
		}, failed(hub.ErrForbidden, "read-only token")},
		{"409 on create", func(e *pushEnv) { e.srv.Store.CreateRepo("kernel", pushRepo, false) },
			func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
				published(t, e, res, err)
				if res.RepoCreated {
					t.Errorf("RepoCreated after 409")
				}
			}},
		{"5xx then success", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCreate, Status: 502, Count: 2})
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubPreupload, Status: 500})
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubLFSUpload, Status: 503})
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Status: 503, Count: 2})
		}, func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
			published(t, e, res, err)
			want := "create 502,create 502,create 200,branch 200,preupload 500,preupload 200,lfs-batch 200,lfs-upload 503,lfs-upload 200,lfs-verify 200,commit 503,commit 503,commit 200,preupload 200,commit 200"
			if got := strings.Join(e.routes(), ","); got != want {
				t.Errorf("requests\n%s\nwant\n%s", got, want)
			}
		}},
		{"5xx persists", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCreate, Status: 503, Count: -1, Message: "maintenance"})
		}, func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
			failed(nil, "HTTP 503", "after retries", "maintenance")(t, e, res, err)
			if n := len(e.srv.PublishLog()); n != 4 { // 1 + MaxRetries(3)
				t.Errorf("%d attempts, want 4", n)
			}
		}},
		{"connection drop mid-commit", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Drop: true})
		}, func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
			published(t, e, res, err)
			if got := strings.Join(e.routes(), ","); !strings.Contains(got, "commit 0,commit 200") {
				t.Errorf("requests %s: want a dropped commit then a retried one", got)
			}
			// The dropped commit was not applied: v1 is one commit on top of main's initial one.
			_, head, _ := e.srv.Store.Resolve("kernel", pushRepo, "v1")
			repo := e.srv.Store.Repo("kernel", pushRepo)
			if parent := repo.Commits[head.Parent]; parent == nil || parent.Parent != "" {
				t.Errorf("v1 history is not initial → build commit")
			}
		}},
		{"connection drop on LFS upload", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubLFSUpload, Drop: true})
		}, published},
		{"commit rejected", func(e *pushEnv) {
			e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Status: 422, Message: "Your push was rejected because it contains files larger than 10 MiB"})
		}, func(t *testing.T, e *pushEnv, res *hub.PushResult, err error) {
			failed(hub.ErrCommitRejected, "HTTP 422", "Your push was rejected because it contains files larger than 10 MiB", "v1")(t, e, res, err)
			var se *hub.StatusError
			if !errors.As(err, &se) || se.Status != 422 {
				t.Errorf("error chain has no StatusError 422: %v", err)
			}
			if _, main, _ := e.srv.Store.Resolve("kernel", pushRepo, "main"); len(main.Files) != 0 {
				t.Errorf("the card was committed after the build commit was rejected")
			}
			if strings.Contains(e.log.String(), "committed") {
				t.Errorf("progress reports a commit: %q", e.log.String())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPushEnv(t)
			tc.setup(e)
			res, err := e.push(t, pushWritePkg(t, pushPkgFiles("1")), hub.PushOptions{})
			tc.check(t, e, res, err)
		})
	}
}

func TestPushCardRejectedAfterBuild(t *testing.T) {
	e := newPushEnv(t)
	dir := pushWritePkg(t, pushPkgFiles("1"))
	if _, err := e.push(t, dir, hub.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	cardBefore := e.files(t, "main")["README.md"]
	// Change the card only (so the card commit is the only commit) and reject it.
	files := pushPkgFiles("1")
	files["README.md"] += "\nMore text.\n"
	e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Status: 400, Message: "Invalid metadata in README.md"})
	res, err := e.push(t, pushWritePkg(t, files), hub.PushOptions{})
	if err == nil || !errors.Is(err, hub.ErrCommitRejected) || !strings.Contains(err.Error(), "Invalid metadata in README.md") || res != nil {
		t.Fatalf("res %+v err %v", res, err)
	}
	if got := e.files(t, "main")["README.md"]; got != cardBefore {
		t.Errorf("main README.md changed to %q after a rejected commit", got)
	}
}

func TestPushRejectsBadRepoID(t *testing.T) {
	e := newPushEnv(t)
	dir := pushWritePkg(t, pushPkgFiles("1"))
	if _, err := hub.Push(context.Background(), e.client, dir, hub.PushOptions{}); err == nil || !strings.Contains(err.Error(), "want ORG/NAME") {
		t.Errorf("empty repo id: err %v", err)
	}
	for _, id := range []string{"noslash", "org/name@v1", "org/../x", "-org/name", "org/na me"} {
		if _, err := e.push(t, dir, hub.PushOptions{RepoID: id}); err == nil || !strings.Contains(err.Error(), "want ORG/NAME") {
			t.Errorf("repo id %q: err %v", id, err)
		}
	}
	if len(e.srv.PublishLog()) != 0 {
		t.Errorf("requests sent for bad repo ids")
	}
}

func TestPushMultipartLFS(t *testing.T) {
	e := newPushEnv(t)
	e.srv.ConfigurePublish(hubtest.PublishConfig{LFSThreshold: 2000, MultipartChunk: 1000})
	files := pushPkgFiles("1")
	big := make([]byte, 2500) // text, but over the LFS threshold: 3 parts of ≤1000 bytes
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	files["build/torch-xpu/weights.txt"] = string(big)
	res, err := e.push(t, pushWritePkg(t, files), hub.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.noViolations(t)
	if got := strings.Join(res.LFS, ","); got != "build/torch-cuda/table.bin,build/torch-xpu/weights.txt" {
		t.Errorf("LFS %s", got)
	}
	equalMaps(t, "v1", e.files(t, "v1"), buildOnly(files))
	parts := 0
	for _, r := range e.srv.PublishLog() {
		if r.Route == hubtest.PubLFSUpload && r.Method == "PUT" && strings.Count(r.Path, "/") == 3 {
			parts++
		}
	}
	if parts != 3 {
		t.Errorf("%d multipart part uploads, want 3", parts)
	}
}

// The Hub applies the commit but the connection drops before the answer: Client.Do
// retries, the retry's deletion finds nothing to delete (404), and the push still
// reports success because the branch holds exactly the package.
func TestPushCommitAnswerLost(t *testing.T) {
	e := newPushEnv(t)
	e.srv.Store.CreateRepo("kernel", pushRepo, false)
	e.srv.Store.Put("kernel", pushRepo, "v1", map[string]hubtest.File{"build/torch-cuda/stale.py": {Data: []byte("old")}})
	e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, DropAfter: true})
	res, err := e.push(t, pushWritePkg(t, pushPkgFiles("1")), hub.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.noViolations(t)
	equalMaps(t, "v1", e.files(t, "v1"), buildOnly(pushPkgFiles("1")))
	_, head, _ := e.srv.Store.Resolve("kernel", pushRepo, "v1")
	if res.BuildCommit != head.SHA {
		t.Errorf("BuildCommit %s, head %s", res.BuildCommit, head.SHA)
	}
	if got := strings.Join(e.routes(), ","); !strings.Contains(got, "commit 0,commit 404") {
		t.Errorf("requests %s: want the lost commit and the retry's 404", got)
	}
	if !strings.Contains(e.log.String(), "answer was lost") {
		t.Errorf("progress %q", e.log.String())
	}
}

// A server that echoes the Authorization header into its error must not get the token
// into ours.
func TestPushErrorNeverCarriesToken(t *testing.T) {
	e := newPushEnv(t)
	e.srv.InjectPublish(hubtest.PublishFault{Route: hubtest.PubCommit, Status: 400, Message: "bad request from Bearer " + pushToken})
	_, err := e.push(t, pushWritePkg(t, pushPkgFiles("1")), hub.PushOptions{})
	if err == nil || !strings.Contains(err.Error(), "bad request from Bearer ***") {
		t.Fatalf("err %v", err)
	}
}
