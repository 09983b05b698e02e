package hubtest_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub/hubtest"
)

const pubTok = "hf_publishValidatorToken"

type pubCall struct {
	method, path string
	hdr          map[string]string
	body         string
}

func pubDo(t *testing.T, base string, c pubCall) (int, string) {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func pubAuth(extra map[string]string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + pubTok}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

func ndjson(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

const hdrLine = `{"key":"header","value":{"summary":"s","description":""}}`

// TestPublishValidation sends requests that break the protocol in one way each and
// checks the server refuses them (and records the violation), then that a correct
// sequence is accepted and applied to the store.
func TestPublishValidation(t *testing.T) {
	srv := hubtest.New(nil)
	srv.Token = pubTok
	ts := srv.Start()
	defer ts.Close()
	srv.Store.CreateRepo("kernel", "org/k", false)
	srv.Store.Put("kernel", "org/k", "v1", map[string]hubtest.File{"build/torch-cuda/old.py": {Data: []byte("old")}})

	commit := "/api/kernels/org/k/commit/v1"
	nd := pubAuth(map[string]string{"Content-Type": "application/x-ndjson"})
	js := pubAuth(map[string]string{"Content-Type": "application/json"})
	lfsHdr := pubAuth(map[string]string{"Content-Type": "application/vnd.git-lfs+json", "Accept": "application/vnd.git-lfs+json"})
	okFile := `{"key":"file","value":{"content":"` + b64("x") + `","path":"build/torch-cuda/a.py","encoding":"base64"}}`

	for _, tc := range []struct {
		name      string
		call      pubCall
		status    int
		violation string // "" when the refusal is not a protocol violation
	}{
		{"commit without token", pubCall{"POST", commit, map[string]string{"Content-Type": "application/x-ndjson"}, ndjson(hdrLine, okFile)}, 401, ""},
		{"commit with wrong token", pubCall{"POST", commit, map[string]string{"Authorization": "Bearer nope", "Content-Type": "application/x-ndjson"}, ndjson(hdrLine, okFile)}, 401, ""},
		{"commit as JSON", pubCall{"POST", commit, js, ndjson(hdrLine, okFile)}, 400, "want application/x-ndjson"},
		{"header not first", pubCall{"POST", commit, nd, ndjson(okFile, hdrLine)}, 400, "line 1 must be"},
		{"header without summary", pubCall{"POST", commit, nd, ndjson(`{"key":"header","value":{"description":"d"}}`, okFile)}, 400, "no summary"},
		{"header with unknown field", pubCall{"POST", commit, nd, ndjson(`{"key":"header","value":{"summary":"s","message":"m"}}`, okFile)}, 400, "unknown field"},
		{"bad base64", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"file","value":{"content":"!!notb64","path":"a.py","encoding":"base64"}}`)}, 400, "not base64"},
		{"wrong encoding", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"file","value":{"content":"eA==","path":"a.py","encoding":"utf-8"}}`)}, 400, "want base64"},
		{"dotdot path", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"file","value":{"content":"eA==","path":"build/../x.py","encoding":"base64"}}`)}, 400, `".." segment`},
		{"absolute path", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"file","value":{"content":"eA==","path":"/x.py","encoding":"base64"}}`)}, 400, "absolute"},
		{"empty segment", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"file","value":{"content":"eA==","path":"build//x.py","encoding":"base64"}}`)}, 400, "empty"},
		{"missing field", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"file","value":{"content":"eA==","encoding":"base64"}}`)}, 400, "file wants"},
		{"unknown key", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"copyFile","value":{"path":"a"}}`)}, 400, "unknown key"},
		{"not JSON", pubCall{"POST", commit, nd, ndjson(hdrLine, `key=file`)}, 400, "line 2"},
		{"same path twice", pubCall{"POST", commit, nd, ndjson(hdrLine, okFile, okFile)}, 400, "appears twice"},
		{"lfsFile never uploaded", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":"`+sha("w")+`","size":1}}`)}, 400, "never uploaded"},
		{"lfsFile bad oid", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":"XYZ","size":1}}`)}, 400, "64 hex"},
		{"header only", pubCall{"POST", commit, nd, ndjson(hdrLine)}, 400, "no operations"},
		{"delete missing file", pubCall{"POST", commit, nd, ndjson(hdrLine, `{"key":"deletedFile","value":{"path":"build/nope.py"}}`)}, 404, ""},
		{"commit to a non-version branch", pubCall{"POST", "/api/kernels/org/k/commit/dev", nd, ndjson(hdrLine, okFile)}, 400, "v<N>"},
		{"commit to missing repo", pubCall{"POST", "/api/kernels/org/none/commit/v1", nd, ndjson(hdrLine, okFile)}, 404, ""},
		{"branch dev on a kernel repo", pubCall{"POST", "/api/kernels/org/k/branch/dev", js, "{}"}, 400, "v<N>"},
		{"branch exists", pubCall{"POST", "/api/kernels/org/k/branch/v1", js, "{}"}, 409, ""},
		{"branch unknown body field", pubCall{"POST", "/api/kernels/org/k/branch/v2", js, `{"from":"main"}`}, 400, "unknown field"},
		{"preupload sample too short", pubCall{"POST", "/api/kernels/org/k/preupload/v1", js, `{"files":[{"path":"a.py","sample":"` + b64("ab") + `","size":3}]}`}, 400, "first min(size, 512)"},
		{"preupload sample not base64", pubCall{"POST", "/api/kernels/org/k/preupload/v1", js, `{"files":[{"path":"a.py","sample":"@@","size":2}]}`}, 400, "not base64"},
		{"preupload no files", pubCall{"POST", "/api/kernels/org/k/preupload/v1", js, `{"files":[]}`}, 400, "0 files"},
		{"create without organization", pubCall{"POST", "/api/repos/create", js, `{"name":"x","type":"kernel"}`}, 400, "organization"},
		{"create bad type", pubCall{"POST", "/api/repos/create", js, `{"name":"x","organization":"org","type":"kernels"}`}, 400, "not a repository type"},
		{"create existing", pubCall{"POST", "/api/repos/create", js, `{"name":"k","organization":"org","type":"kernel"}`}, 409, ""},
		{"lfs batch wrong media type", pubCall{"POST", "/kernels/org/k.git/info/lfs/objects/batch", js, `{"operation":"upload","transfers":["basic"],"objects":[{"oid":"` + sha("w") + `","size":1}]}`}, 400, "application/vnd.git-lfs+json"},
		{"lfs batch download", pubCall{"POST", "/kernels/org/k.git/info/lfs/objects/batch", lfsHdr, `{"operation":"download","transfers":["basic"],"objects":[{"oid":"` + sha("w") + `","size":1}]}`}, 400, "want \"upload\""},
		{"lfs batch without basic", pubCall{"POST", "/kernels/org/k.git/info/lfs/objects/batch", lfsHdr, `{"operation":"upload","transfers":["xet"],"objects":[{"oid":"` + sha("w") + `","size":1}]}`}, 400, "basic"},
		{"lfs put never asked", pubCall{"PUT", "/hubtest-lfs/" + sha("q"), nil, "q"}, 400, "no batch answer asked for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(srv.Violations())
			status, body := pubDo(t, ts.URL, tc.call)
			if status != tc.status {
				t.Fatalf("HTTP %d %s, want %d", status, body, tc.status)
			}
			v := srv.Violations()[before:]
			if tc.violation == "" {
				if len(v) != 0 {
					t.Errorf("recorded violations %v", v)
				}
				return
			}
			if len(v) != 1 || !strings.Contains(v[0], tc.violation) {
				t.Errorf("violations %v, want one saying %q", v, tc.violation)
			}
		})
	}
	// Nothing above changed v1.
	if _, c, _ := srv.Store.Resolve("kernel", "org/k", "v1"); len(c.Files) != 1 {
		t.Fatalf("v1 changed by refused requests: %v", c.Files)
	}

	// A correct sequence: batch, PUT (no token), verify, commit with an lfsFile, a file
	// and a deletion.
	data := "\x00weights"
	status, body := pubDo(t, ts.URL, pubCall{"POST", "/kernels/org/k.git/info/lfs/objects/batch", lfsHdr,
		`{"operation":"upload","transfers":["basic","multipart"],"objects":[{"oid":"` + sha(data) + `","size":8}],"hash_algo":"sha256","ref":{"name":"v1"}}`})
	if status != 200 {
		t.Fatalf("batch: %d %s", status, body)
	}
	var batch struct {
		Objects []struct {
			Actions struct {
				Upload, Verify struct{ Href string }
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &batch); err != nil || len(batch.Objects) != 1 {
		t.Fatalf("batch answer %s: %v", body, err)
	}
	up := strings.TrimPrefix(batch.Objects[0].Actions.Upload.Href, ts.URL)
	if status, body := pubDo(t, ts.URL, pubCall{"PUT", up, pubAuth(nil), data}); status != 400 || !strings.Contains(body, "token was sent to the storage") {
		t.Errorf("PUT with the token: %d %s", status, body)
	}
	if status, body := pubDo(t, ts.URL, pubCall{"PUT", up, nil, "\x00weightX"}); status != 400 || !strings.Contains(body, "sha256") {
		t.Errorf("PUT of wrong content: %d %s", status, body)
	}
	if status, body := pubDo(t, ts.URL, pubCall{"PUT", up, nil, data}); status != 200 {
		t.Fatalf("PUT: %d %s", status, body)
	}
	lfsLine := `{"key":"lfsFile","value":{"path":"build/torch-cuda/w.bin","algo":"sha256","oid":"` + sha(data) + `","size":8}}`
	if status, body := pubDo(t, ts.URL, pubCall{"POST", commit, nd, ndjson(hdrLine, lfsLine)}); status != 400 || !strings.Contains(body, "not verified") {
		t.Errorf("commit before verify: %d %s", status, body)
	}
	verify := strings.TrimPrefix(batch.Objects[0].Actions.Verify.Href, ts.URL)
	if status, body := pubDo(t, ts.URL, pubCall{"POST", verify, lfsHdr, `{"oid":"` + sha(data) + `","size":8}`}); status != 200 {
		t.Fatalf("verify: %d %s", status, body)
	}
	del := `{"key":"deletedFile","value":{"path":"build/torch-cuda/old.py"}}`
	status, body = pubDo(t, ts.URL, pubCall{"POST", commit, nd, ndjson(hdrLine, okFile, lfsLine, del)})
	if status != 200 || !strings.Contains(body, `"commitOid"`) {
		t.Fatalf("commit: %d %s", status, body)
	}
	_, c, _ := srv.Store.Resolve("kernel", "org/k", "v1")
	if len(c.Files) != 2 || string(c.Files["build/torch-cuda/a.py"].Data) != "x" || !c.Files["build/torch-cuda/w.bin"].LFS ||
		string(c.Files["build/torch-cuda/w.bin"].Data) != data || c.Summary != "s" {
		t.Errorf("v1 after commit: %+v", c)
	}
}
