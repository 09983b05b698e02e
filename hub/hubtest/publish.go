package hubtest

// The publish side of the test Hub: repo creation, branches, preupload, commits and
// the Git LFS batch/upload/verify endpoints. Each request is validated against the
// protocol the real clients speak, read from their source (huggingface_hub 1.33):
//
//   - POST /api/repos/create {"name","organization","type","private"|"visibility"}
//     (hf_api.py create_repo); 409 when it exists.
//   - POST /api/{type}s/{org}/{name}/branch/{branch} {"startingPoint"?} (hf_api.py
//     create_branch); 409 when it exists. Kernel repos take only v<N> (DESIGN).
//   - POST /api/{type}s/{org}/{name}/preupload/{rev} {"files":[{"path","sample","size"}]}
//     → {"files":[{"path","uploadMode","shouldIgnore","oid"?}]} (_commit_api.py
//     _fetch_upload_modes, _validate_preupload_info).
//   - POST /api/{type}s/{org}/{name}/commit/{rev}, Content-Type application/x-ndjson:
//     a header line then file / lfsFile / deletedFile / deletedFolder lines
//     (_commit_api.py _prepare_commit_payload, _send_commit) → {"commitOid","commitUrl"}.
//   - POST /{prefix}{org}/{name}.git/info/lfs/objects/batch with Accept and Content-Type
//     application/vnd.git-lfs+json {"operation":"upload","transfers","objects":[{oid,size}]}
//     (lfs.py post_lfs_batch_info; prefix "kernels/" for kernels, constants.py
//     REPO_TYPES_URL_PREFIXES), then PUT to the upload href without the Hub token
//     (lfs.py _upload_single_part) or multipart PUTs + completion (lfs.py
//     _upload_multi_part), then POST {"oid","size"} to the verify href (lfs.py lfs_upload).
//
// A request that breaks the protocol is answered 400 and recorded (Violations), so a
// test can assert a client never broke it. Commits are applied to the Store, so the
// download routes (download.go) then serve what was committed.
//
// The routes are POST/PUT patterns in the mux; the download side answers GET/HEAD
// before the mux (server.go ServeHTTP), so the two never overlap. The branch tree a
// publisher lists (GET /api/{type}s/{repo}/tree/{rev}?recursive=true) is download.go's.

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// registerPublish mounts the repo-create / branch / preupload / commit / LFS routes.
func (s *Server) registerPublish(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/repos/create", s.pubHandler(PubCreate, s.handleCreate))
	mux.HandleFunc("POST /api/{types}/{org}/{name}/branch/{branch}", s.pubHandler(PubBranch, s.handleBranch))
	mux.HandleFunc("POST /api/{types}/{org}/{name}/preupload/{rev}", s.pubHandler(PubPreupload, s.handlePreupload))
	mux.HandleFunc("POST /api/{types}/{org}/{name}/commit/{rev}", s.pubHandler(PubCommit, s.handleCommit))
	mux.HandleFunc("POST /{types}/{org}/{namegit}/info/lfs/objects/batch", s.pubHandler(PubLFSBatch, s.handleLFSBatch))
	mux.HandleFunc("POST /{org}/{namegit}/info/lfs/objects/batch", s.pubHandler(PubLFSBatch, s.handleLFSBatch))
	mux.HandleFunc("PUT /hubtest-lfs/{oid}", s.pubHandler(PubLFSUpload, s.handleLFSPut))
	mux.HandleFunc("PUT /hubtest-lfs/{oid}/{part}", s.pubHandler(PubLFSUpload, s.handleLFSPart))
	mux.HandleFunc("POST /hubtest-lfs/{oid}", s.pubHandler(PubLFSUpload, s.handleLFSComplete))
	mux.HandleFunc("POST /hubtest-lfs-verify/{oid}", s.pubHandler(PubLFSVerify, s.handleLFSVerify))
}

// PublishRoute names a publish endpoint, for faults and the request log.
type PublishRoute string

const (
	PubCreate    PublishRoute = "create"
	PubBranch    PublishRoute = "branch"
	PubPreupload PublishRoute = "preupload"
	PubCommit    PublishRoute = "commit"
	PubLFSBatch  PublishRoute = "lfs-batch"
	PubLFSUpload PublishRoute = "lfs-upload" // basic PUT, multipart part PUTs and completion
	PubLFSVerify PublishRoute = "lfs-verify"
)

// PublishFault makes requests to a publish route fail before they are looked at.
type PublishFault struct {
	Route PublishRoute
	// Status is answered with Message as the Hub's error (X-Error-Message and
	// {"error": Message}); ignored when Drop is set.
	Status  int
	Message string
	// Drop reads half of the request body, then closes the connection without answering.
	Drop bool
	// DropAfter handles the request (a commit is applied), then closes the connection
	// without sending the answer: the client cannot know it succeeded.
	DropAfter bool
	// Stall answers nothing until the client goes away (after Hook, when set).
	Stall bool
	// Hook, when set, is called (in its own goroutine) when the fault fires.
	Hook func()
	// Count is how many requests it affects: 0 means 1, negative means all.
	Count int
}

// PublishRequest is one publish request as the server saw it.
type PublishRequest struct {
	Route      PublishRoute
	Method     string
	Path       string
	Status     int  // 0 when the connection was dropped
	Authorized bool // carried an Authorization header
	Fault      bool // answered by an injected fault
}

// PublishConfig tunes how the server answers uploads.
type PublishConfig struct {
	// LFSThreshold: files of at least this size are "lfs" at preupload (default 10 MiB,
	// the Hub's limit for regular files); binary samples (a NUL byte) are always "lfs".
	LFSThreshold int64
	// MultipartChunk > 0 offers the multipart transfer, with parts of this size, for
	// LFS objects larger than one part.
	MultipartChunk int64
}

type pubState struct {
	mu         sync.Mutex
	cfg        PublishConfig
	faults     []*PublishFault
	log        []PublishRequest
	violations []string
	pending    map[string]int64          // oid → size, issued by a batch answer, not uploaded yet
	uploaded   map[string][]byte         // oid → content
	verified   map[string]bool           // oid → verify called
	parts      map[string]map[int][]byte // oid → part number → bytes (multipart)
}

// pubStates holds each server's publish state; Server's fields belong to server.go.
var pubStates sync.Map // *Server → *pubState

func (s *Server) pub() *pubState {
	if st, ok := pubStates.Load(s); ok {
		return st.(*pubState)
	}
	st, _ := pubStates.LoadOrStore(s, &pubState{
		cfg:     PublishConfig{LFSThreshold: 10 << 20},
		pending: map[string]int64{}, uploaded: map[string][]byte{}, verified: map[string]bool{}, parts: map[string]map[int][]byte{},
	})
	return st.(*pubState)
}

// ConfigurePublish sets how uploads are answered: LFSThreshold 0 keeps the current
// threshold, MultipartChunk 0 turns multipart off.
func (s *Server) ConfigurePublish(cfg PublishConfig) {
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	if cfg.LFSThreshold > 0 {
		st.cfg.LFSThreshold = cfg.LFSThreshold
	}
	st.cfg.MultipartChunk = cfg.MultipartChunk
}

// InjectPublish adds a fault; faults are consumed in the order they were added.
func (s *Server) InjectPublish(f PublishFault) {
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	if f.Count == 0 {
		f.Count = 1
	}
	st.faults = append(st.faults, &f)
}

// PublishLog returns the publish requests served so far, in order.
func (s *Server) PublishLog() []PublishRequest {
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]PublishRequest(nil), st.log...)
}

// Violations returns every protocol violation seen so far (each was answered 400).
func (s *Server) Violations() []string {
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.violations...)
}

// LFSObject returns uploaded LFS content by sha256.
func (s *Server) LFSObject(oid string) ([]byte, bool) {
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	b, ok := st.uploaded[oid]
	return b, ok
}

// discardWriter swallows an answer (for DropAfter).
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return r.ResponseWriter.(http.Hijacker).Hijack()
}

// pubHandler applies faults, then the handler, and logs the request.
func (s *Server) pubHandler(route PublishRoute, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		entry := PublishRequest{Route: route, Method: r.Method, Path: r.URL.Path, Authorized: r.Header.Get("Authorization") != ""}
		defer func() {
			entry.Status = rec.status
			st := s.pub()
			st.mu.Lock()
			st.log = append(st.log, entry)
			st.mu.Unlock()
		}()
		if f := s.takePublishFault(route); f != nil {
			entry.Fault = true
			if f.Hook != nil {
				go f.Hook()
			}
			if f.Stall {
				// Read the body first: only then does the server notice the client leaving.
				io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
				return
			}
			if f.DropAfter {
				h(&discardWriter{h: http.Header{}}, r)
				pubDrop(rec)
				return
			}
			if f.Drop {
				// Half of the body arrives; the handler never runs.
				io.Copy(io.Discard, io.LimitReader(r.Body, max(r.ContentLength/2, 1)))
				pubDrop(rec)
				return
			}
			pubError(rec, f.Status, "", f.Message)
			return
		}
		h(rec, r)
	}
}

func (s *Server) takePublishFault(route PublishRoute) *PublishFault {
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	var f *PublishFault
	f, st.faults = takeFault(st.faults, func(f *PublishFault) *int { return &f.Count },
		func(f *PublishFault) bool { return f.Route == route })
	return f
}

// pubDrop closes the connection without an answer.
func pubDrop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func pubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func pubJSON(w http.ResponseWriter, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	json.NewEncoder(w).Encode(v)
}

// violation records a protocol error and answers 400.
func (s *Server) violation(w http.ResponseWriter, r *http.Request, format string, args ...any) {
	msg := fmt.Sprintf("%s %s: ", r.Method, r.URL.Path) + fmt.Sprintf(format, args...)
	st := s.pub()
	st.mu.Lock()
	st.violations = append(st.violations, msg)
	st.mu.Unlock()
	pubError(w, http.StatusBadRequest, "BadRequest", "hubtest: protocol violation: "+msg)
}

// writeAuth checks the bearer token every write needs: s.Token when set, else any.
func (s *Server) writeAuth(w http.ResponseWriter, r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	switch {
	case h == "" || !ok || strings.TrimSpace(tok) == "":
		pubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return false
	case s.Token != "" && tok != s.Token:
		pubError(w, http.StatusUnauthorized, "", "Invalid username or password.")
		return false
	}
	return true
}

// mediaType checks a header's media type (parameters allowed).
func mediaType(r *http.Request, header, want string) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get(header))
	return err == nil && mt == want
}

// decodeStrict reads JSON into v, refusing unknown fields and trailing data.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// repoFromPath resolves {types}/{org}/{name} into a repo type and id; false after
// writing the answer.
func (s *Server) repoFromPath(w http.ResponseWriter, r *http.Request, plural, org, name string) (string, string, *Repo, bool) {
	t, ok := pluralType(plural)
	if !ok {
		pubError(w, http.StatusNotFound, "", "unknown repository type "+plural)
		return "", "", nil, false
	}
	id := org + "/" + name
	repo := s.Store.Repo(t, id)
	if repo == nil {
		pubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found: "+t+" "+id)
		return "", "", nil, false
	}
	return t, id, repo, true
}

func pluralType(p string) (string, bool) {
	switch p {
	case "models", "datasets", "spaces", "kernels":
		return strings.TrimSuffix(p, "s"), true
	}
	return "", false
}

func typePrefix(t string) string {
	if t == "model" {
		return ""
	}
	return t + "s/"
}

func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// repoName follows huggingface_hub's validate_repo_id for one part.
var repoName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,96}$`)

var (
	sha256Hex     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	kernelBranch  = regexp.MustCompile(`^v(0|[1-9][0-9]*)$`)
	lfsMediaType  = "application/vnd.git-lfs+json"
	ndjsonMedia   = "application/x-ndjson"
	maxCommitBody = int64(4 << 30)
)

func validRepoPart(s string) bool {
	return repoName.MatchString(s) && !strings.Contains(s, "--") && !strings.Contains(s, "..") &&
		!strings.HasPrefix(s, "-") && !strings.HasPrefix(s, ".") && !strings.HasSuffix(s, "-") && !strings.HasSuffix(s, ".")
}

// validRepoPath: relative, slash-separated, no empty, "." or ".." segment, no backslash.
func validRepoPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute", p)
	case strings.Contains(p, "\\"):
		return fmt.Errorf("path %q has a backslash", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q has a NUL byte", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

// validRevision: a kernel repo's branches are main and v<N>.
// writeTarget checks what the preupload and commit handlers check first -- the write token,
// the repository in the path, a revision a kernel repo can have -- and answers the request
// itself when one fails (ok false).
func (s *Server) writeTarget(w http.ResponseWriter, r *http.Request) (repoType, id, rev string, ok bool) {
	if !s.writeAuth(w, r) {
		return "", "", "", false
	}
	t, id, _, ok := s.repoFromPath(w, r, r.PathValue("types"), r.PathValue("org"), r.PathValue("name"))
	if !ok {
		return "", "", "", false
	}
	rev = r.PathValue("rev")
	if !validRevision(t, rev) {
		s.violation(w, r, "revision %q: kernel repos have main and v<N>", rev)
		return "", "", "", false
	}
	return t, id, rev, true
}

func validRevision(repoType, rev string) bool {
	return repoType != "kernel" || rev == "main" || kernelBranch.MatchString(rev)
}

// --- repo create ---------------------------------------------------------------------

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	if !s.writeAuth(w, r) {
		return
	}
	if !mediaType(r, "Content-Type", "application/json") {
		s.violation(w, r, "Content-Type %q, want application/json", r.Header.Get("Content-Type"))
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req struct {
		Name         *string `json:"name"`
		Organization *string `json:"organization"`
		Type         *string `json:"type"`
		Private      *bool   `json:"private"`
		Visibility   *string `json:"visibility"`
	}
	if err := decodeStrict(body, &req); err != nil {
		s.violation(w, r, "body: %v", err)
		return
	}
	repoType := "model"
	if req.Type != nil {
		repoType = *req.Type
	}
	switch {
	case req.Name == nil || !validRepoPart(*req.Name):
		s.violation(w, r, "name missing or invalid: %v", deref(req.Name))
		return
	case req.Organization == nil || !validRepoPart(*req.Organization):
		s.violation(w, r, "organization missing or invalid: %v (hubtest has no user namespace)", deref(req.Organization))
		return
	case repoType != "model" && repoType != "dataset" && repoType != "space" && repoType != "kernel":
		s.violation(w, r, "type %q is not a repository type", repoType)
		return
	case req.Visibility != nil && *req.Visibility != "public" && *req.Visibility != "private":
		s.violation(w, r, "visibility %q", *req.Visibility)
		return
	}
	private := (req.Private != nil && *req.Private) || (req.Visibility != nil && *req.Visibility == "private")
	id := *req.Organization + "/" + *req.Name
	u := baseURL(r) + "/" + typePrefix(repoType) + id
	if _, created := s.Store.CreateRepo(repoType, id, private); !created {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(map[string]string{"error": "You already created this " + repoType + " repo", "url": u})
		return
	}
	pubJSON(w, "application/json", map[string]string{"url": u, "name": id})
}

func deref(p *string) string {
	if p == nil {
		return "<missing>"
	}
	return fmt.Sprintf("%q", *p)
}

// --- branch --------------------------------------------------------------------------

func (s *Server) handleBranch(w http.ResponseWriter, r *http.Request) {
	if !s.writeAuth(w, r) {
		return
	}
	t, id, _, ok := s.repoFromPath(w, r, r.PathValue("types"), r.PathValue("org"), r.PathValue("name"))
	if !ok {
		return
	}
	branch := r.PathValue("branch")
	if t == "kernel" && !kernelBranch.MatchString(branch) {
		s.violation(w, r, "branch %q: kernel versions live on branches v<N>", branch)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req struct {
		StartingPoint *string `json:"startingPoint"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if !mediaType(r, "Content-Type", "application/json") {
			s.violation(w, r, "Content-Type %q, want application/json", r.Header.Get("Content-Type"))
			return
		}
		if err := decodeStrict(body, &req); err != nil {
			s.violation(w, r, "body: %v", err)
			return
		}
	}
	from := "main"
	if req.StartingPoint != nil {
		from = *req.StartingPoint
	}
	if _, _, err := s.Store.Resolve(t, id, from); err != nil {
		pubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+from)
		return
	}
	created, err := s.Store.CreateBranch(t, id, branch, from)
	if err != nil {
		pubError(w, http.StatusNotFound, "", err.Error())
		return
	}
	if !created {
		pubError(w, http.StatusConflict, "", "Reference already exists: refs/heads/"+branch)
		return
	}
	pubJSON(w, "application/json", map[string]any{})
}

// --- preupload -----------------------------------------------------------------------

func (s *Server) handlePreupload(w http.ResponseWriter, r *http.Request) {
	t, id, rev, ok := s.writeTarget(w, r)
	if !ok {
		return
	}
	_, head, err := s.Store.Resolve(t, id, rev)
	if err != nil {
		pubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	if !mediaType(r, "Content-Type", "application/json") {
		s.violation(w, r, "Content-Type %q, want application/json", r.Header.Get("Content-Type"))
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req struct {
		Files []struct {
			Path   *string `json:"path"`
			Sample *string `json:"sample"`
			Size   *int64  `json:"size"`
		} `json:"files"`
		GitIgnore *string `json:"gitIgnore"`
	}
	if err := decodeStrict(body, &req); err != nil {
		s.violation(w, r, "body: %v", err)
		return
	}
	if len(req.Files) == 0 || len(req.Files) > 256 {
		s.violation(w, r, "%d files (want 1 to 256 per request)", len(req.Files))
		return
	}
	st := s.pub()
	st.mu.Lock()
	threshold := st.cfg.LFSThreshold
	st.mu.Unlock()
	var out []map[string]any
	for i, f := range req.Files {
		if f.Path == nil || f.Sample == nil || f.Size == nil {
			s.violation(w, r, "files[%d]: path, sample and size are all required", i)
			return
		}
		if err := validRepoPath(*f.Path); err != nil {
			s.violation(w, r, "files[%d]: %v", i, err)
			return
		}
		sample, err := base64.StdEncoding.Strict().DecodeString(*f.Sample)
		if err != nil {
			s.violation(w, r, "files[%d] %s: sample is not base64: %v", i, *f.Path, err)
			return
		}
		if *f.Size < 0 || int64(len(sample)) != min(*f.Size, 512) {
			s.violation(w, r, "files[%d] %s: sample of %d bytes for size %d (want the first min(size, 512) bytes)", i, *f.Path, len(sample), *f.Size)
			return
		}
		mode := "regular"
		if *f.Size > 0 && (*f.Size >= threshold || bytes.IndexByte(sample, 0) >= 0) {
			mode = "lfs"
		}
		e := map[string]any{"path": *f.Path, "uploadMode": mode, "shouldIgnore": false}
		if cur, ok := head.Files[*f.Path]; ok {
			e["oid"] = blobOid(cur)
		}
		out = append(out, e)
	}
	pubJSON(w, "application/json", map[string]any{"files": out, "commitOid": head.SHA})
}

// blobOid is what the Hub reports as a file's oid: sha256 for LFS files, the git blob
// id for regular ones (huggingface_hub compares it with the local oid the same way).
func blobOid(f File) string {
	if f.LFS {
		return f.SHA256()
	}
	return f.GitSHA1()
}

// --- commit --------------------------------------------------------------------------

type commitLine struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (s *Server) handleCommit(w http.ResponseWriter, r *http.Request) {
	t, id, rev, ok := s.writeTarget(w, r)
	if !ok {
		return
	}
	if !mediaType(r, "Content-Type", ndjsonMedia) {
		s.violation(w, r, "Content-Type %q, want %s", r.Header.Get("Content-Type"), ndjsonMedia)
		return
	}
	_, head, err := s.Store.Resolve(t, id, rev)
	if err != nil {
		pubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCommitBody))
	if err != nil {
		return // the client went away
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		s.violation(w, r, "empty commit body")
		return
	}
	// 1. header
	var hl commitLine
	if err := decodeStrict([]byte(lines[0]), &hl); err != nil || hl.Key != "header" {
		s.violation(w, r, "line 1 must be {\"key\":\"header\",\"value\":{...}} (err %v, key %q)", err, hl.Key)
		return
	}
	var hdr struct {
		Summary      *string `json:"summary"`
		Description  *string `json:"description"`
		ParentCommit *string `json:"parentCommit"`
	}
	if err := decodeStrict(hl.Value, &hdr); err != nil {
		s.violation(w, r, "header value: %v", err)
		return
	}
	if hdr.Summary == nil || strings.TrimSpace(*hdr.Summary) == "" {
		s.violation(w, r, "header has no summary")
		return
	}
	if hdr.ParentCommit != nil && *hdr.ParentCommit != head.SHA {
		pubError(w, http.StatusPreconditionFailed, "", "parentCommit "+*hdr.ParentCommit+" is not the head of "+rev)
		return
	}
	// 2. operations
	add := map[string]File{}
	var del []string
	seen := map[string]bool{}
	st := s.pub()
	for i, line := range lines[1:] {
		n := i + 2
		var cl commitLine
		if err := decodeStrict([]byte(line), &cl); err != nil {
			s.violation(w, r, "line %d: %v", n, err)
			return
		}
		var p string
		switch cl.Key {
		case "file":
			var v struct {
				Content  *string `json:"content"`
				Path     *string `json:"path"`
				Encoding *string `json:"encoding"`
			}
			if err := decodeStrict(cl.Value, &v); err != nil || v.Content == nil || v.Path == nil || v.Encoding == nil {
				s.violation(w, r, "line %d: file wants {content, path, encoding} (%v)", n, err)
				return
			}
			if *v.Encoding != "base64" {
				s.violation(w, r, "line %d: encoding %q, want base64", n, *v.Encoding)
				return
			}
			data, err := base64.StdEncoding.Strict().DecodeString(*v.Content)
			if err != nil {
				s.violation(w, r, "line %d (%s): content is not base64: %v", n, *v.Path, err)
				return
			}
			p = *v.Path
			add[p] = File{Data: data}
		case "lfsFile":
			var v struct {
				Path *string `json:"path"`
				Algo *string `json:"algo"`
				Oid  *string `json:"oid"`
				Size *int64  `json:"size"`
			}
			if err := decodeStrict(cl.Value, &v); err != nil || v.Path == nil || v.Algo == nil || v.Oid == nil {
				s.violation(w, r, "line %d: lfsFile wants {path, algo, oid, size} (%v)", n, err)
				return
			}
			if *v.Algo != "sha256" || !sha256Hex.MatchString(*v.Oid) {
				s.violation(w, r, "line %d: lfsFile algo %q oid %q (want sha256 and 64 hex digits)", n, *v.Algo, *v.Oid)
				return
			}
			st.mu.Lock()
			data, up := st.uploaded[*v.Oid]
			verified := st.verified[*v.Oid]
			st.mu.Unlock()
			if !up {
				s.violation(w, r, "line %d (%s): LFS object %s was never uploaded (upload through the batch API before the commit)", n, *v.Path, *v.Oid)
				return
			}
			if !verified {
				s.violation(w, r, "line %d (%s): LFS object %s was uploaded but not verified", n, *v.Path, *v.Oid)
				return
			}
			if v.Size != nil && *v.Size != int64(len(data)) {
				s.violation(w, r, "line %d (%s): size %d, uploaded object has %d bytes", n, *v.Path, *v.Size, len(data))
				return
			}
			p = *v.Path
			add[p] = File{Data: data, LFS: true}
		case "deletedFile", "deletedFolder":
			var v struct {
				Path *string `json:"path"`
			}
			if err := decodeStrict(cl.Value, &v); err != nil || v.Path == nil {
				s.violation(w, r, "line %d: %s wants {path} (%v)", n, cl.Key, err)
				return
			}
			p = *v.Path
			if err := validRepoPath(strings.TrimSuffix(p, "/")); err != nil {
				s.violation(w, r, "line %d: %v", n, err)
				return
			}
			if cl.Key == "deletedFile" {
				if _, ok := head.Files[p]; !ok {
					pubError(w, http.StatusNotFound, "EntryNotFound", "A file with this name doesn't exist: "+p)
					return
				}
				del = append(del, p)
			} else {
				prefix := strings.TrimSuffix(p, "/") + "/"
				found := false
				for fp := range head.Files {
					if strings.HasPrefix(fp, prefix) {
						del = append(del, fp)
						found = true
					}
				}
				if !found {
					pubError(w, http.StatusNotFound, "EntryNotFound", "A folder with this name doesn't exist: "+p)
					return
				}
			}
		default:
			s.violation(w, r, "line %d: unknown key %q (want file, lfsFile, deletedFile or deletedFolder)", n, cl.Key)
			return
		}
		if err := validRepoPath(strings.TrimSuffix(p, "/")); err != nil {
			s.violation(w, r, "line %d: %v", n, err)
			return
		}
		if seen[p] {
			s.violation(w, r, "line %d: path %s appears twice in one commit", n, p)
			return
		}
		seen[p] = true
	}
	if len(add) == 0 && len(del) == 0 {
		s.violation(w, r, "commit has no operations")
		return
	}
	sort.Strings(del)
	sha, err := s.Store.Apply(t, id, rev, *hdr.Summary, add, del)
	if err != nil {
		pubError(w, http.StatusNotFound, "", err.Error())
		return
	}
	pubJSON(w, "application/json", map[string]any{
		"success":   true,
		"commitOid": sha,
		"commitUrl": baseURL(r) + "/" + typePrefix(t) + id + "/commit/" + sha,
	})
}

// --- LFS -----------------------------------------------------------------------------

func (s *Server) handleLFSBatch(w http.ResponseWriter, r *http.Request) {
	plural := r.PathValue("types")
	if plural == "" {
		plural = "models"
	}
	name, isGit := strings.CutSuffix(r.PathValue("namegit"), ".git")
	if !isGit {
		pubError(w, http.StatusNotFound, "", "not a git LFS endpoint")
		return
	}
	if !s.writeAuth(w, r) {
		return
	}
	t, _, _, ok := s.repoFromPath(w, r, plural, r.PathValue("org"), name)
	if !ok {
		return
	}
	if !mediaType(r, "Accept", lfsMediaType) || !mediaType(r, "Content-Type", lfsMediaType) {
		s.violation(w, r, "Accept %q and Content-Type %q, want %s for both", r.Header.Get("Accept"), r.Header.Get("Content-Type"), lfsMediaType)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req struct {
		Operation *string  `json:"operation"`
		Transfers []string `json:"transfers"`
		Objects   []struct {
			Oid  *string `json:"oid"`
			Size *int64  `json:"size"`
		} `json:"objects"`
		HashAlgo *string `json:"hash_algo"`
		Ref      *struct {
			Name string `json:"name"`
		} `json:"ref"`
	}
	if err := decodeStrict(body, &req); err != nil {
		s.violation(w, r, "body: %v", err)
		return
	}
	switch {
	case req.Operation == nil || *req.Operation != "upload":
		s.violation(w, r, "operation %v, want \"upload\"", deref(req.Operation))
		return
	case !slices.Contains(req.Transfers, "basic"):
		s.violation(w, r, "transfers %v do not include basic", req.Transfers)
		return
	case req.HashAlgo != nil && *req.HashAlgo != "sha256":
		s.violation(w, r, "hash_algo %q, want sha256", *req.HashAlgo)
		return
	case len(req.Objects) == 0 || len(req.Objects) > 256:
		s.violation(w, r, "%d objects (want 1 to 256)", len(req.Objects))
		return
	case req.Ref != nil && !validRevision(t, req.Ref.Name):
		s.violation(w, r, "ref %q: kernel repos have main and v<N>", req.Ref.Name)
		return
	}
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	multipart := st.cfg.MultipartChunk > 0 && slices.Contains(req.Transfers, "multipart")
	base := baseURL(r)
	var out []map[string]any
	transfer := "basic"
	for i, o := range req.Objects {
		if o.Oid == nil || o.Size == nil || !sha256Hex.MatchString(*o.Oid) || *o.Size < 0 {
			msg := fmt.Sprintf("objects[%d]: want {oid: 64 hex digits, size >= 0}", i)
			st.violations = append(st.violations, r.URL.Path+": "+msg)
			pubError(w, http.StatusBadRequest, "", "hubtest: protocol violation: "+msg)
			return
		}
		oid, size := *o.Oid, *o.Size
		if b, ok := st.uploaded[oid]; ok && int64(len(b)) == size {
			out = append(out, map[string]any{"oid": oid, "size": size}) // already stored: no actions
			continue
		}
		st.pending[oid] = size
		upload := map[string]any{"href": base + "/hubtest-lfs/" + oid}
		if multipart && size > st.cfg.MultipartChunk {
			transfer = "multipart"
			hdr := map[string]any{"chunk_size": strconv.FormatInt(st.cfg.MultipartChunk, 10)}
			for n := int64(1); (n-1)*st.cfg.MultipartChunk < size; n++ {
				hdr[fmt.Sprintf("%05d", n)] = fmt.Sprintf("%s/hubtest-lfs/%s/%d", base, oid, n)
			}
			upload["header"] = hdr
		}
		out = append(out, map[string]any{"oid": oid, "size": size, "authenticated": true, "actions": map[string]any{
			"upload": upload,
			"verify": map[string]any{"href": base + "/hubtest-lfs-verify/" + oid},
		}})
	}
	pubJSON(w, lfsMediaType, map[string]any{"transfer": transfer, "objects": out, "hash_algo": "sha256"})
}

// storageRequest checks what every storage request shares: the oid was issued by a
// batch answer, and the Hub token is not sent to storage.
func (s *Server) storageRequest(w http.ResponseWriter, r *http.Request) (oid string, size int64, ok bool) {
	oid = r.PathValue("oid")
	if r.Header.Get("Authorization") != "" {
		s.violation(w, r, "the Hub token was sent to the storage URL")
		return "", 0, false
	}
	st := s.pub()
	st.mu.Lock()
	size, ok = st.pending[oid]
	st.mu.Unlock()
	if !ok {
		s.violation(w, r, "upload of %s that no batch answer asked for", oid)
		return "", 0, false
	}
	return oid, size, true
}

func (s *Server) handleLFSPut(w http.ResponseWriter, r *http.Request) {
	oid, size, ok := s.storageRequest(w, r)
	if !ok {
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, size+1))
	if err != nil {
		return
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != size || hex.EncodeToString(sum[:]) != oid {
		s.violation(w, r, "uploaded %d bytes with sha256 %x for object %s of %d bytes", len(data), sum, oid, size)
		return
	}
	st := s.pub()
	st.mu.Lock()
	st.uploaded[oid] = data
	delete(st.pending, oid)
	st.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleLFSPart(w http.ResponseWriter, r *http.Request) {
	oid, size, ok := s.storageRequest(w, r)
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.PathValue("part"))
	if err != nil || n < 1 {
		s.violation(w, r, "part number %q", r.PathValue("part"))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, size+1))
	if err != nil {
		return
	}
	st := s.pub()
	st.mu.Lock()
	if st.parts[oid] == nil {
		st.parts[oid] = map[int][]byte{}
	}
	st.parts[oid][n] = data
	st.mu.Unlock()
	w.Header().Set("ETag", partETag(data))
	w.WriteHeader(http.StatusOK)
}

func partETag(b []byte) string { s := md5.Sum(b); return `"` + hex.EncodeToString(s[:]) + `"` }

func (s *Server) handleLFSComplete(w http.ResponseWriter, r *http.Request) {
	oid, size, ok := s.storageRequest(w, r)
	if !ok {
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req struct {
		Oid   string `json:"oid"`
		Parts []struct {
			PartNumber int    `json:"partNumber"`
			Etag       string `json:"etag"`
		} `json:"parts"`
	}
	if err := decodeStrict(body, &req); err != nil || req.Oid != oid {
		s.violation(w, r, "completion body (want {oid: %s, parts}): %v", oid, err)
		return
	}
	st := s.pub()
	st.mu.Lock()
	parts := st.parts[oid]
	chunk := st.cfg.MultipartChunk
	st.mu.Unlock()
	want := int((size + chunk - 1) / chunk)
	if len(req.Parts) != want {
		s.violation(w, r, "%d parts completed, %d expected", len(req.Parts), want)
		return
	}
	var all []byte
	for i, p := range req.Parts {
		data, ok := parts[p.PartNumber]
		if p.PartNumber != i+1 || !ok || p.Etag != partETag(data) {
			s.violation(w, r, "part %d: number %d etag %q does not match an uploaded part", i+1, p.PartNumber, p.Etag)
			return
		}
		if i < want-1 && int64(len(data)) != chunk {
			s.violation(w, r, "part %d has %d bytes, want %d", i+1, len(data), chunk)
			return
		}
		all = append(all, data...)
	}
	sum := sha256.Sum256(all)
	if int64(len(all)) != size || hex.EncodeToString(sum[:]) != oid {
		s.violation(w, r, "assembled %d bytes with sha256 %x for object %s of %d bytes", len(all), sum, oid, size)
		return
	}
	st.mu.Lock()
	st.uploaded[oid] = all
	delete(st.pending, oid)
	delete(st.parts, oid)
	st.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleLFSVerify(w http.ResponseWriter, r *http.Request) {
	if !s.writeAuth(w, r) {
		return
	}
	oid := r.PathValue("oid")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req struct {
		Oid  *string `json:"oid"`
		Size *int64  `json:"size"`
	}
	if err := decodeStrict(body, &req); err != nil || req.Oid == nil || req.Size == nil || *req.Oid != oid {
		s.violation(w, r, "verify body (want {oid: %s, size}): %v", oid, err)
		return
	}
	st := s.pub()
	st.mu.Lock()
	defer st.mu.Unlock()
	data, ok := st.uploaded[oid]
	if !ok || int64(len(data)) != *req.Size {
		pubError(w, http.StatusNotFound, "", "object "+oid+" not found or of another size")
		return
	}
	st.verified[oid] = true
	w.WriteHeader(http.StatusOK)
}
