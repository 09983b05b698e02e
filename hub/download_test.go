package hub_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/hub/hubtest"
)

const repoID = "org/tiny"

// fixtureFiles is a small model repository: regular files, one LFS weight file big
// enough to be cut in the middle, and files the default selection leaves out.
func fixtureFiles() map[string]hubtest.File {
	rng := rand.New(rand.NewSource(1))
	weights := make([]byte, 700_000)
	rng.Read(weights)
	shard := make([]byte, 90_000)
	rng.Read(shard)
	return map[string]hubtest.File{
		"config.json":             {Data: []byte(`{"model_type":"llama","hidden_size":64}`)},
		"tokenizer.json":          {Data: bytes.Repeat([]byte(`{"tok":1}`), 500)},
		"model.safetensors":       {Data: weights, LFS: true},
		"extra/model.safetensors": {Data: shard, LFS: true},
		"README.md":               {Data: []byte("# tiny\n")},
	}
}

var defaultSelection = []string{"config.json", "model.safetensors", "tokenizer.json"}

type env struct {
	store  *hubtest.Store
	files  map[string]hubtest.File
	commit string
	srv    *hubtest.Server
	url    string
	close  func()
	cache  hub.Cache
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{store: hubtest.NewStore(), files: fixtureFiles()}
	e.commit = e.store.Put("model", repoID, "main", e.files)
	e.cache = hub.Cache{Dir: t.TempDir()}
	e.start(t)
	return e
}

// start (re)starts the test Hub over the same store on a new listener.
func (e *env) start(t *testing.T) {
	t.Helper()
	e.srv = hubtest.New(e.store)
	e.srv.Token = "hf_TESTSECRETtoken1234567890"
	ts := e.srv.Start()
	e.url = ts.URL
	e.close = ts.Close
	t.Cleanup(ts.Close)
}

func (e *env) client(vars ...string) *hub.Client {
	m := map[string]string{"HF_ENDPOINT": e.url, "HF_HOME": "/nonexistent-hf-home"}
	for i := 0; i+1 < len(vars); i += 2 {
		m[vars[i]] = vars[i+1]
	}
	c := hub.NewClient(func(k string) string { return m[k] })
	c.MaxRetries = 3
	c.Backoff = func(int) time.Duration { return time.Millisecond }
	c.IdleTimeout = 300 * time.Millisecond
	return c
}

func (e *env) snapshot(ctx context.Context, c *hub.Client, opts hub.FetchOptions) (string, string, error) {
	return c.Snapshot(ctx, e.cache, hub.Ref{Repo: repoID, Revision: "main"}, opts)
}

// checkCache asserts the cache holds no visible corrupt file: every blob is named by
// the sha256 (LFS) or git sha1 of a store file and has exactly its content, every
// snapshot entry is a relative symlink to the blob of the same path, and no temporary
// file is left. It returns the snapshot paths and the .incomplete partials found.
func checkCache(t *testing.T, e *env) (snap []string, partials map[string]int64) {
	t.Helper()
	byEtag := map[string]hubtest.File{}
	for _, f := range e.files {
		if f.LFS {
			byEtag[f.SHA256()] = f
		} else {
			byEtag[f.GitSHA1()] = f
		}
	}
	root := filepath.Join(e.cache.Dir, "models--org--tiny")
	partials = map[string]int64{}
	blobs, _ := os.ReadDir(filepath.Join(root, "blobs"))
	for _, b := range blobs {
		p := filepath.Join(root, "blobs", b.Name())
		st, _ := os.Stat(p)
		if strings.HasSuffix(b.Name(), ".incomplete") {
			partials[strings.TrimSuffix(b.Name(), ".incomplete")] = st.Size()
			continue
		}
		f, ok := byEtag[b.Name()]
		if !ok {
			t.Errorf("blob %s names no file of the repository", b.Name())
			continue
		}
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, f.Data) {
			t.Errorf("blob %s: %d bytes do not match the repository file (%d bytes)", b.Name(), len(got), len(f.Data))
		}
	}
	sd := filepath.Join(root, "snapshots", e.commit)
	filepath.WalkDir(filepath.Join(root, "snapshots"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(sd, p)
		rel = filepath.ToSlash(rel)
		if strings.HasSuffix(rel, ".tmp") {
			t.Errorf("temporary file left in the snapshot: %s", rel)
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil || filepath.IsAbs(target) {
			t.Errorf("snapshot %s: not a relative symlink (%q, %v)", rel, target, err)
			return nil
		}
		f, ok := e.files[rel]
		if !ok {
			t.Errorf("snapshot %s: not a repository file", rel)
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("snapshot %s: content differs from the repository (%v)", rel, err)
		}
		snap = append(snap, rel)
		return nil
	})
	return snap, partials
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

const model = "model.safetensors"

func TestSnapshotFaults(t *testing.T) {
	size := int64(len(fixtureFiles()[model].Data))
	cases := []struct {
		name   string
		faults []hubtest.Fault
		// served is the number of bytes of model.safetensors the server must have sent.
		served  int64
		minTime time.Duration
	}{
		{name: "no fault", served: size},
		{name: "body cut mid-file", faults: []hubtest.Fault{{Kind: hubtest.FaultCut, Path: model, After: 300_000}}, served: size},
		{name: "body cut twice", faults: []hubtest.Fault{{Kind: hubtest.FaultCut, Path: model, After: 100_000, Count: 2}}, served: size},
		{name: "500 then success", faults: []hubtest.Fault{{Kind: hubtest.FaultStatus, Status: 500, Path: model, Count: 2}}, served: size},
		{name: "503 on HEAD then success", faults: []hubtest.Fault{{Kind: hubtest.FaultStatus, Status: 503, Route: hubtest.RouteHEAD, Path: model}}, served: size},
		{name: "500 on revision info then success", faults: []hubtest.Fault{{Kind: hubtest.FaultStatus, Status: 500, Route: hubtest.RouteAPI}}, served: size},
		{name: "429 with Retry-After", faults: []hubtest.Fault{{Kind: hubtest.FaultStatus, Status: 429, RetryAfter: "1", Path: model}}, served: size, minTime: time.Second},
		{name: "wrong content once", faults: []hubtest.Fault{{Kind: hubtest.FaultWrongContent, Path: model}}, served: 2 * size},
		{name: "cut then Range ignored", faults: []hubtest.Fault{
			{Kind: hubtest.FaultCut, Path: model, After: 200_000},
			{Kind: hubtest.FaultIgnoreRange, Path: model}}, served: 200_000 + size},
		{name: "stalled body (idle timeout) then resume", faults: []hubtest.Fault{{Kind: hubtest.FaultStall, Path: model, After: 50_000}}, served: size},
		{name: "CDN 403 (expired signed URL) then a fresh HEAD", faults: []hubtest.Fault{{Kind: hubtest.FaultStatus, Status: 403, Path: model}}, served: size},
		{name: "connection dropped before headers", faults: []hubtest.Fault{{Kind: hubtest.FaultCut, Path: model, After: 0}}, served: size},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, f := range tc.faults {
				e.srv.Inject(f)
			}
			t0 := time.Now()
			dir, commit, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{})
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			if d := time.Since(t0); d < tc.minTime {
				t.Errorf("took %v, want at least %v (Retry-After)", d, tc.minTime)
			}
			if commit != e.commit || dir != filepath.Join(e.cache.Dir, "models--org--tiny", "snapshots", e.commit) {
				t.Errorf("got %s %s, want commit %s", dir, commit, e.commit)
			}
			snap, partials := checkCache(t, e)
			if !sameSet(snap, defaultSelection) {
				t.Errorf("snapshot holds %v, want %v", snap, defaultSelection)
			}
			if len(partials) != 0 {
				t.Errorf("partials left: %v", partials)
			}
			t.Logf("cache after %q: snapshot %v, %d partials, %s bytes sent %d", tc.name, snap, len(partials), model, e.srv.Served(model))
			if got := e.srv.Served(model); got != tc.served {
				t.Errorf("server sent %d bytes of %s, want %d", got, model, tc.served)
			}
			ref, err := os.ReadFile(filepath.Join(e.cache.Dir, "models--org--tiny", "refs", "main"))
			if err != nil || string(ref) != e.commit {
				t.Errorf("refs/main = %q (%v), want %q without newline", ref, err, e.commit)
			}
			// A second fetch downloads nothing.
			before := e.srv.Served(model)
			if _, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{}); err != nil {
				t.Fatal(err)
			}
			if e.srv.Served(model) != before || e.srv.Served("config.json") != int64(len(e.files["config.json"].Data)) {
				t.Errorf("second fetch downloaded again")
			}
		})
	}
}

func TestSnapshotPersistentFaultsLeaveNoVisibleFile(t *testing.T) {
	cases := []struct {
		name  string
		fault hubtest.Fault
		is    error
		// partial says whether a resumable .incomplete may remain.
		partial bool
	}{
		{"wrong content every time", hubtest.Fault{Kind: hubtest.FaultWrongContent, Path: model, Count: -1}, hub.ErrChecksum, false},
		{"body longer than announced every time", hubtest.Fault{Kind: hubtest.FaultTooLong, Path: model, Count: -1}, hub.ErrChecksum, false},
		{"500 forever", hubtest.Fault{Kind: hubtest.FaultStatus, Status: 500, Path: model, Count: -1}, nil, false},
		{"cut forever", hubtest.Fault{Kind: hubtest.FaultCut, Path: model, After: 0, Count: -1}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.srv.Inject(tc.fault)
			_, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{Workers: 1})
			if err == nil {
				t.Fatal("Snapshot succeeded, want an error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), "hub: "+model) {
				t.Errorf("error does not name the file: %v", err)
			}
			if strings.Contains(err.Error(), "Signature") {
				t.Errorf("error shows the signed CDN URL's query: %v", err)
			}
			snap, partials := checkCache(t, e)
			for _, s := range snap {
				if s == model {
					t.Errorf("%s is visible after a failed download", model)
				}
			}
			t.Logf("cache after %q: snapshot %v, partials %v, error: %v", tc.name, snap, partials, err)
			if !tc.partial && partials[e.files[model].SHA256()] > 0 {
				t.Errorf("non-empty partial left: %v", partials)
			}
			if _, err := os.Stat(filepath.Join(e.cache.Dir, "models--org--tiny", "refs", "main")); err == nil {
				t.Errorf("refs/main written for an incomplete snapshot")
			}
		})
	}
}

// TestServerStoppedAndRestarted: the Hub dies in the middle of the weights; the fetch
// fails and keeps its partial; against a restarted Hub the fetch resumes and the
// server sends only the missing bytes.
func TestServerStoppedAndRestarted(t *testing.T) {
	e := newEnv(t)
	const after = 250_000
	e.srv.Inject(hubtest.Fault{Kind: hubtest.FaultDown, Path: model, After: after})
	_, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{Workers: 1})
	if err == nil {
		t.Fatal("fetch from a stopped server succeeded")
	}
	_, partials := checkCache(t, e)
	sha := e.files[model].SHA256()
	if partials[sha] != after {
		t.Fatalf("partial holds %d bytes, want %d (%v)", partials[sha], after, partials)
	}
	e.close()
	e.start(t) // a new listener over the same store
	dir, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{})
	if err != nil {
		t.Fatalf("fetch after restart: %v", err)
	}
	t.Logf("cache after the stop: partial %d bytes, no visible %s; after restart the server sent %d bytes", after, model, e.srv.Served(model))
	if got, want := e.srv.Served(model), int64(len(e.files[model].Data))-after; got != want {
		t.Errorf("restarted server sent %d bytes of %s, want only the missing %d", got, model, want)
	}
	snap, partials := checkCache(t, e)
	if !sameSet(snap, defaultSelection) || len(partials) != 0 {
		t.Errorf("snapshot %v partials %v", snap, partials)
	}
	if _, err := os.Stat(filepath.Join(dir, model)); err != nil {
		t.Error(err)
	}
}

// TestInterruptKeepsResumablePartial: Ctrl-C (context cancel) in the middle of a file.
func TestInterruptKeepsResumablePartial(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	const after = 123_456
	e.srv.Inject(hubtest.Fault{Kind: hubtest.FaultStall, Path: model, After: after, Hook: func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}})
	c := e.client()
	c.IdleTimeout = time.Minute
	_, _, err := e.snapshot(ctx, c, hub.FetchOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	snap, partials := checkCache(t, e)
	for _, s := range snap {
		if s == model {
			t.Errorf("%s visible after interrupt", model)
		}
	}
	if got := partials[e.files[model].SHA256()]; got != after {
		t.Fatalf("partial %d bytes, want %d", got, after)
	}
	if _, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := e.srv.Served(model), int64(len(e.files[model].Data)); got != want {
		t.Errorf("served %d bytes in all, want %d (resume must not refetch)", got, want)
	}
	checkCache(t, e)
}

// TestConcurrentFetches: several fetches of one repository into one cache at once;
// the lock makes the weights travel once and every fetch sees a complete snapshot.
func TestConcurrentFetches(t *testing.T) {
	e := newEnv(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	dirs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], _, errs[i] = e.snapshot(context.Background(), e.client(), hub.FetchOptions{})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("fetch %d: %v", i, errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Errorf("fetch %d got %s, fetch 0 %s", i, dirs[i], dirs[0])
		}
	}
	if got, want := e.srv.Served(model), int64(len(e.files[model].Data)); got != want {
		t.Errorf("served %d bytes of %s for %d fetches, want %d (once)", got, model, n, want)
	}
	snap, partials := checkCache(t, e)
	if !sameSet(snap, defaultSelection) || len(partials) != 0 {
		t.Errorf("snapshot %v partials %v", snap, partials)
	}
}

func TestIncludeExclude(t *testing.T) {
	cases := []struct {
		include, exclude []string
		want             []string
	}{
		{nil, nil, defaultSelection},
		{[]string{"*.safetensors"}, nil, []string{"model.safetensors", "extra/model.safetensors"}},
		{[]string{"extra/"}, nil, []string{"extra/model.safetensors"}},
		{[]string{"*"}, []string{"*.safetensors"}, []string{"config.json", "tokenizer.json", "README.md"}},
		{nil, []string{"tokenizer*"}, []string{"config.json", "model.safetensors"}},
		{[]string{"README.[mM]d", "config.json"}, nil, []string{"README.md", "config.json"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.include, tc.exclude), func(t *testing.T) {
			e := newEnv(t)
			if _, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{Include: tc.include, Exclude: tc.exclude}); err != nil {
				t.Fatal(err)
			}
			snap, _ := checkCache(t, e)
			if !sameSet(snap, tc.want) {
				t.Errorf("got %v, want %v", snap, tc.want)
			}
		})
	}
	e := newEnv(t)
	_, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{Include: []string{"*.gguf"}})
	if err == nil || !strings.Contains(err.Error(), "no file matches") || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("no-match error %v should say so and list the repository", err)
	}
}

func TestAuth(t *testing.T) {
	for _, kind := range []string{"gated", "private"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			r := e.store.Repo("model", repoID)
			if kind == "gated" {
				r.Gated = true
			} else {
				r.Private = true
			}
			secret := e.srv.Token
			var warnings strings.Builder
			opts := hub.FetchOptions{Warn: func(s string) { warnings.WriteString(s) }}
			for _, tok := range []string{"", "hf_WRONGtoken000000000000"} {
				_, _, err := e.snapshot(context.Background(), e.client("HF_TOKEN", tok), opts)
				if !errors.Is(err, hub.ErrAuth) {
					t.Fatalf("token %q: error %v, want ErrAuth", tok, err)
				}
				msg := err.Error()
				if tok == "" && !strings.Contains(msg, "HF_TOKEN") {
					t.Errorf("error does not say how to authenticate: %s", msg)
				}
				if tok != "" && strings.Contains(msg, tok) {
					t.Errorf("error shows the token: %s", msg)
				}
			}
			// The token from the token file ($HF_HOME/token) works, and is never sent to the CDN.
			home := t.TempDir()
			os.WriteFile(filepath.Join(home, "token"), []byte(secret+"\n"), 0o600)
			c := e.client("HF_HOME", home)
			if _, _, err := e.snapshot(context.Background(), c, opts); err != nil {
				t.Fatalf("with token: %v", err)
			}
			if n := e.srv.CDNAuthorized(); n != 0 {
				t.Errorf("the token was sent to the CDN %d times", n)
			}
			checkCache(t, e)
			filepath.WalkDir(e.cache.Dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
						t.Errorf("token found in %s", p)
					}
				}
				return nil
			})
			if strings.Contains(warnings.String(), secret) {
				t.Errorf("token in warnings")
			}
		})
	}
}

func TestOffline(t *testing.T) {
	e := newEnv(t)
	ref := hub.Ref{Repo: repoID, Revision: "main"}
	// Nothing cached: offline says what is missing.
	_, _, err := e.client("HF_HUB_OFFLINE", "1").Snapshot(context.Background(), e.cache, ref, hub.FetchOptions{})
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") || !strings.Contains(err.Error(), "refs") {
		t.Errorf("offline, empty cache: %v", err)
	}
	want, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.close() // no network from here on
	dir, commit, err := e.client("HF_HUB_OFFLINE", "1").Snapshot(context.Background(), e.cache, ref, hub.FetchOptions{})
	if err != nil || dir != want || commit != e.commit {
		t.Fatalf("offline: %s %s %v", dir, commit, err)
	}
	// Hub unreachable and cached: the cached snapshot, with a warning.
	var warned string
	dir, _, err = e.snapshot(context.Background(), e.client(), hub.FetchOptions{Warn: func(s string) { warned = s }})
	if err != nil || dir != want || !strings.Contains(warned, "cached snapshot") {
		t.Errorf("unreachable: %s %v warning %q", dir, err, warned)
	}
	// Unreachable, and the selection is not cached: an error naming what is missing.
	_, _, err = e.snapshot(context.Background(), e.client(), hub.FetchOptions{Include: []string{"README.md"}})
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "README.md") {
		t.Errorf("unreachable, not cached: %v", err)
	}
	// A snapshot whose blob vanished (dangling link) is not complete.
	blob := filepath.Join(e.cache.Dir, "models--org--tiny", "blobs", e.files[model].SHA256())
	os.Remove(blob)
	_, _, err = e.client("HF_HUB_OFFLINE", "1").Snapshot(context.Background(), e.cache, ref, hub.FetchOptions{})
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), model) {
		t.Errorf("dangling: %v", err)
	}
}

func TestRevisions(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	_, _, err := c.Snapshot(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "nope"}, hub.FetchOptions{})
	if !errors.Is(err, hub.ErrRevisionNotFound) {
		t.Errorf("missing revision: %v", err)
	}
	_, _, err = c.Snapshot(context.Background(), e.cache, hub.Ref{Repo: "org/absent", Revision: "main"}, hub.FetchOptions{})
	if err == nil || !strings.Contains(err.Error(), "org/absent") {
		t.Errorf("missing repo: %v", err)
	}
	// A commit sha as revision: no refs file is written for it.
	dir, commit, err := c.Snapshot(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: e.commit}, hub.FetchOptions{})
	if err != nil || commit != e.commit || filepath.Base(dir) != e.commit {
		t.Fatalf("by commit: %s %s %v", dir, commit, err)
	}
	if _, err := os.Stat(filepath.Join(e.cache.Dir, "models--org--tiny", "refs", e.commit)); err == nil {
		t.Error("refs/<sha> written")
	}
	for _, bad := range []string{"../x", "a//b", "/abs"} {
		if _, _, err := c.Snapshot(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: bad}, hub.FetchOptions{}); !errors.Is(err, hub.ErrBadRef) {
			t.Errorf("revision %q: %v", bad, err)
		}
	}
	// A new commit on main moves refs/main.
	files := fixtureFiles()
	files["config.json"] = hubtest.File{Data: []byte(`{"model_type":"llama","hidden_size":128}`)}
	newCommit := e.store.Put("model", repoID, "main", files)
	_, commit, err = c.Snapshot(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "main"}, hub.FetchOptions{})
	ref, _ := os.ReadFile(filepath.Join(e.cache.Dir, "models--org--tiny", "refs", "main"))
	if err != nil || commit != newCommit || string(ref) != newCommit {
		t.Errorf("after a new commit: %s refs %s %v", commit, ref, err)
	}
}

func TestDownloadOneFile(t *testing.T) {
	e := newEnv(t)
	p, err := e.client().Download(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "main"}, "extra/model.safetensors", hub.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !bytes.Equal(b, e.files["extra/model.safetensors"].Data) {
		t.Error("content differs")
	}
	target, _ := os.Readlink(p)
	if want := "../../../blobs/" + e.files["extra/model.safetensors"].SHA256(); target != want {
		t.Errorf("link %q, want %q", target, want)
	}
	_, err = e.client().Download(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "main"}, "absent.json", hub.FetchOptions{})
	if !errors.Is(err, hub.ErrEntryNotFound) {
		t.Errorf("absent file: %v", err)
	}
	e.close()
	off := e.client("HF_HUB_OFFLINE", "1")
	if q, err := off.Download(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "main"}, "extra/model.safetensors", hub.FetchOptions{}); err != nil || q != p {
		t.Errorf("offline: %s %v, want %s", q, err, p)
	}
	if _, err := off.Download(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "main"}, "config.json", hub.FetchOptions{}); !errors.Is(err, hub.ErrNotCached) {
		t.Errorf("offline, not cached: %v", err)
	}
}

// Kernel repositories live under /api/kernels and /kernels/...; every file is taken by default.
func TestKernelRepoType(t *testing.T) {
	e := newEnv(t)
	files := map[string]hubtest.File{
		"build/torch-cuda/__init__.py":   {Data: []byte("from .layers import *\n")},
		"build/torch-cuda/metadata.json": {Data: []byte(`{"name":"k"}`)},
		"README.md":                      {Data: []byte("# k")},
	}
	commit := e.store.Put("kernel", "org/k", "v1", files)
	dir, got, err := e.client().Snapshot(context.Background(), e.cache, hub.Ref{Repo: "org/k", Revision: "v1"}, hub.FetchOptions{RepoType: "kernel"})
	if err != nil || got != commit || dir != filepath.Join(e.cache.Dir, "kernels--org--k", "snapshots", commit) {
		t.Fatalf("%s %s %v", dir, got, err)
	}
	for p, f := range files {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || !bytes.Equal(b, f.Data) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, _, err := e.client("HF_HUB_OFFLINE", "1").Snapshot(context.Background(), e.cache, hub.Ref{Repo: "org/k", Revision: "v1"}, hub.FetchOptions{RepoType: "kernel"}); err != nil {
		t.Errorf("offline: %v", err)
	}
}

// TestEtagNaming pins the blob names to huggingface_hub's rules.
func TestEtagNaming(t *testing.T) {
	e := newEnv(t)
	m, err := e.client().FileMetadata(context.Background(), "model", repoID, "main", model)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(e.files[model].Data)
	if m.Etag != hex.EncodeToString(sum[:]) || !m.LFS || m.Size != int64(len(e.files[model].Data)) || m.Commit != e.commit {
		t.Errorf("LFS metadata %+v", m)
	}
	if !strings.Contains(m.Location, "/cdn-lfs/") {
		t.Errorf("location %s is not the CDN", m.Location)
	}
	m, err = e.client().FileMetadata(context.Background(), "model", repoID, "main", "config.json")
	if err != nil {
		t.Fatal(err)
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(e.files["config.json"].Data))
	h.Write(e.files["config.json"].Data)
	if m.Etag != hex.EncodeToString(h.Sum(nil)) || m.LFS {
		t.Errorf("regular metadata %+v", m)
	}
}

// TestSilentHubFallsBackToCache: with the revision cached, a Hub that accepts the
// connection and never answers costs one HF_HUB_ETAG_TIMEOUT, then the cache answers.
func TestSilentHubFallsBackToCache(t *testing.T) {
	e := newEnv(t)
	want, _, err := e.snapshot(context.Background(), e.client(), hub.FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer silent.Close()
	c := hub.NewClient(func(k string) string {
		return map[string]string{"HF_ENDPOINT": silent.URL, "HF_HUB_ETAG_TIMEOUT": "1"}[k]
	})
	var warned string
	start := time.Now()
	dir, _, err := c.Snapshot(context.Background(), e.cache, hub.Ref{Repo: repoID, Revision: "main"},
		hub.FetchOptions{Warn: func(s string) { warned = s }})
	if err != nil || dir != want || !strings.Contains(warned, "no answer within 1s") {
		t.Fatalf("dir %s, err %v, warning %q", dir, err, warned)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Errorf("fell back after %s, want one timeout", took)
	}
}
