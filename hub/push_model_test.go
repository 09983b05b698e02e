package hub_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/hub/hubtest"
)

// A model repo's files come from disk: a large one is hashed in one pass and uploaded in
// multipart sections read from the file (never held whole), a regular one committed
// inline; main then holds exactly them, stale files deleted, .gitattributes kept.
func TestPushModelStreamsLocalFiles(t *testing.T) {
	e := newPushEnv(t)
	e.srv.ConfigurePublish(hubtest.PublishConfig{LFSThreshold: 2000, MultipartChunk: 1000})
	dir := t.TempDir()
	big := make([]byte, 2600)
	for i := range big {
		big[i] = byte(i * 7)
	}
	write := func(name string, b []byte) hub.PackageFile {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := hub.LocalFile(name, p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	weights := write("model.safetensors", big)
	plan := write("plan.yaml", []byte("schema: 2\n"))
	if weights.Size() != 2600 || weights.Data != nil || len(weights.Sample()) != 512 || plan.Size() != 10 {
		t.Fatalf("LocalFile: size %d, sample %d", weights.Size(), len(weights.Sample()))
	}
	card := hub.PackageFile{Path: "README.md", Data: []byte("# packed\n")}
	e.srv.Store.CreateRepo("model", "org/packed", false)
	e.srv.Store.Put("model", "org/packed", "main", map[string]hubtest.File{".gitattributes": {Data: []byte("*.safetensors filter=lfs\n")},
		"old.safetensors": {Data: []byte("stale"), LFS: true}})

	res, err := hub.PushModel(context.Background(), e.client, []hub.PackageFile{weights, plan, card},
		hub.ModelPushOptions{RepoID: "org/packed", Summary: "upload", Progress: e.log})
	if err != nil {
		t.Fatal(err)
	}
	e.noViolations(t)
	_, main, _ := e.srv.Store.Resolve("model", "org/packed", "main")
	got := map[string]string{}
	for p, f := range main.Files {
		got[p] = string(f.Data)
	}
	equalMaps(t, "main", got, map[string]string{"model.safetensors": string(big), "plan.yaml": "schema: 2\n", "README.md": "# packed\n",
		".gitattributes": "*.safetensors filter=lfs\n"})
	if strings.Join(res.LFS, ",") != "model.safetensors" || strings.Join(res.Deleted, ",") != "old.safetensors" ||
		res.URL != e.url+"/org/packed" || res.Branch != "main" || res.BuildCommit != main.SHA {
		t.Errorf("result %+v", res)
	}
	parts := 0
	for _, r := range e.srv.PublishLog() {
		if r.Route == hubtest.PubLFSUpload && r.Method == http.MethodPut && strings.Count(r.Path, "/") == 3 {
			parts++
		}
		if r.Route == hubtest.PubLFSBatch && strings.HasPrefix(r.Path, "/models/") {
			t.Errorf("model LFS batch under a type prefix: %s", r.Path)
		}
	}
	if parts != 3 {
		t.Errorf("%d multipart parts, want 3", parts)
	}

	// a file changed after it was described is refused, not published half-right
	if err := os.WriteFile(filepath.Join(dir, "plan.yaml"), []byte("schema: 3, edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.PushModel(context.Background(), e.client, []hub.PackageFile{plan}, hub.ModelPushOptions{RepoID: "org/packed"}); err == nil ||
		!strings.Contains(err.Error(), "changed since it was hashed") {
		t.Errorf("changed file: %v", err)
	}
}

func TestPushModelRefusesBadInput(t *testing.T) {
	e := newPushEnv(t)
	f := hub.PackageFile{Path: "a.txt", Data: []byte("a")}
	for _, c := range []struct {
		id    string
		files []hub.PackageFile
		want  string
	}{
		{"org/x@v1", []hub.PackageFile{f}, "want ORG/NAME"},
		{"noslash", []hub.PackageFile{f}, "want ORG/NAME"},
		{"org/x", nil, "nothing to publish"},
		{"org/x", []hub.PackageFile{f, f}, "repeats"},
		{"org/x", []hub.PackageFile{{Path: "../up", Data: []byte("x")}}, "climbs out"},
	} {
		if _, err := hub.PushModel(context.Background(), e.client, c.files, hub.ModelPushOptions{RepoID: c.id}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: err %v, want %q", c.id, c.files, err, c.want)
		}
	}
	if len(e.srv.PublishLog()) != 0 {
		t.Error("requests sent for bad input")
	}
}

// GET /api/{type}s/{repo}/refs lists the branches (what kernels' get_kernel(version=N)
// resolves v<N> with), and a private repo answers only with the token.
func TestServerListsRefs(t *testing.T) {
	e := newPushEnv(t)
	e.srv.Store.Put("kernel", "org/k", "main", map[string]hubtest.File{"README.md": {Data: []byte("x")}})
	if _, err := e.srv.Store.CreateBranch("kernel", "org/k", "v1", "main"); err != nil {
		t.Fatal(err)
	}
	get := func(token string) (*http.Response, map[string][]map[string]string) {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/api/kernels/org/k/refs", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string][]map[string]string
		json.NewDecoder(resp.Body).Decode(&body)
		return resp, body
	}
	resp, body := get("")
	_, main, _ := e.srv.Store.Resolve("kernel", "org/k", "main")
	if resp.StatusCode != 200 || len(body["branches"]) != 2 || body["branches"][1]["name"] != "v1" ||
		body["branches"][1]["ref"] != "refs/heads/v1" || body["branches"][1]["targetCommit"] != main.SHA || body["tags"] == nil {
		t.Errorf("refs: %d %v", resp.StatusCode, body)
	}
	e.srv.Store.Repo("kernel", "org/k").Private = true
	if resp, _ := get(""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("private without token: %d %s", resp.StatusCode, resp.Header.Get("X-Error-Code"))
	}
	if resp, _ := get(pushToken); resp.StatusCode != 200 {
		t.Errorf("private with token: %d", resp.StatusCode)
	}
}
