package hubtest

// The download side of the test Hub. What it answers, and why, follows what the real
// huggingface_hub client reads (huggingface_hub 1.33, read from its source):
//
//   - HEAD/GET {endpoint}/{prefix}{org}/{name}/resolve/{rev}/{path}
//     (file_download.py: hf_hub_url, get_hf_file_metadata, _get_metadata_or_catch_error).
//     Every answer carries X-Repo-Commit (required: "missing the 'X-Repo-Commit' header"
//     is a FileMetadataError). A regular file answers 200 with ETag "<git sha1>" and
//     Content-Length. An LFS file answers 302 to a "CDN" URL on another host name with
//     ETag/X-Linked-Etag "<sha256>" and X-Linked-Size: huggingface_hub follows HEAD
//     redirects only while they stay on the same host (utils/_http.py:
//     _httpx_follow_hub_redirects_with_backoff, _is_same_or_hub_host), so the CDN uses
//     "localhost" when the request came to "127.0.0.1" and the other way round.
//     No X-Xet-Hash header or xet-auth link is ever sent, so clients take the plain HTTP
//     path (utils/_xet.py: parse_xet_file_data_from_response).
//   - GET {endpoint}/api/{type}s/{org}/{name}[/revision/{rev}] (hf_api.py: model_info;
//     ModelInfo needs "id" and "sha"; "siblings" with rfilename, and with ?blobs=true
//     size, blobId, lfs{sha256,size,pointerSize}).
//   - GET {endpoint}/api/{type}s/{org}/{name}/tree/{rev}[/{path}]?recursive=true
//     (hf_api.py: list_repo_tree, RepoFile: type, path, size, oid, lfs{oid,size,pointerSize}),
//     which snapshot_download (_snapshot_download.py) lists files with.
//   - GET {endpoint}/api/{type}s/{org}/{name}/refs (hf_api.py: list_repo_refs:
//     {"branches","tags","converts","pullRequests"} of {"name","ref","targetCommit"}),
//     which kernels' get_kernel(version=N) resolves the branch v<N> with (_versions.py).
//   - Errors carry X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound / GatedRepo
//     (utils/_http.py: hf_raise_for_status).
//   - The CDN (GET /cdn-lfs/{sha256}) has its own ETag (md5 of the content) and honours Range.

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// registerDownload is kept for the server's construction order; download routes are
// dispatched by serveDownload before the mux (see ServeHTTP), because their patterns
// ("{org}/{name}/resolve/{rev}/{path...}" with and without a type prefix) would overlap
// in http.ServeMux and panic.
func (s *Server) registerDownload(mux *http.ServeMux) {}

// FaultKind says what a fault does to a matching request.
type FaultKind int

const (
	// FaultCut sends After bytes of the body, then drops the connection.
	FaultCut FaultKind = iota + 1
	// FaultStatus answers Status (e.g. 500, 503, 429) instead, with Retry-After when set.
	FaultStatus
	// FaultWrongContent serves the right length with wrong bytes (one byte flipped).
	FaultWrongContent
	// FaultIgnoreRange answers a Range request with 200 and the whole body.
	FaultIgnoreRange
	// FaultDown sends After bytes, drops the connection, and from then on the server
	// drops every connection, as a stopped server would (start a new Server over the
	// same Store to "restart").
	FaultDown
	// FaultStall sends After bytes, then sends nothing until the client goes away.
	FaultStall
	// FaultTooLong sends the content followed by extra bytes (Content-Length agrees).
	FaultTooLong
	// FaultShortWhole answers every GET with 200 and the whole file's Content-Length,
	// whatever the Range, and drops the connection after After bytes.
	FaultShortWhole
	// FaultStatedSize states Size as the file's size: in the HEAD (RouteHEAD: X-Linked-Size,
	// or Content-Length of a regular file) or in the listing (RouteAPI, Path required).
	FaultStatedSize
	// FaultEcho puts the request's bearer token where Where says: RouteAPI "sha" (the
	// revision's commit), "path" (a listed file), "body" (an error body, the token across
	// byte 512), "message" (an error's X-Error-Message); RouteHEAD "etag", "commit"
	// (X-Repo-Commit).
	FaultEcho
)

// Route says which kind of request a fault applies to.
type Route int

const (
	// RouteContent is a GET that returns file bytes (resolve of a regular file, or the CDN).
	RouteContent Route = iota
	// RouteHEAD is a HEAD on resolve.
	RouteHEAD
	// RouteAPI is a revision-info or tree listing call.
	RouteAPI
)

// Fault is one injected failure.
type Fault struct {
	Kind  FaultKind
	Route Route
	// Path is the repository file the fault applies to ("" = any).
	Path string
	// Count is how many matching requests it affects: 0 means 1, negative means all.
	Count      int
	After      int64  // bytes sent before a cut, stall or stop
	Status     int    // for FaultStatus
	RetryAfter string // for FaultStatus: the Retry-After header value
	Size       int64  // for FaultStatedSize
	Where      string // for FaultEcho
	// Hook, when set, is called (in its own goroutine) when the fault fires.
	Hook func()
}

type faultState struct {
	mu     sync.Mutex
	faults []*Fault
	served map[string]int64 // file path -> content bytes written
	reqs   map[string]int   // "route path" -> requests
	authOn map[string]int   // CDN requests that carried Authorization
}

func (s *Server) state() *faultState {
	s.once.Do(func() {
		s.fs = &faultState{served: map[string]int64{}, reqs: map[string]int{}, authOn: map[string]int{}}
	})
	return s.fs
}

// Inject adds a fault; faults are consumed in the order they were added.
func (s *Server) Inject(f Fault) {
	st := s.state()
	st.mu.Lock()
	defer st.mu.Unlock()
	if f.Count == 0 {
		f.Count = 1
	}
	st.faults = append(st.faults, &f)
}

// Served is the number of file-content bytes this server wrote for a repository path
// (resolve and CDN together), so tests can check a resumed download did not fetch
// finished bytes again.
func (s *Server) Served(path string) int64 {
	st := s.state()
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.served[path]
}

// Requests counts requests of a route for a path.
func (s *Server) Requests(r Route, path string) int {
	st := s.state()
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.reqs[fmt.Sprint(r, " ", path)]
}

// CDNAuthorized counts CDN requests that carried an Authorization header (a client
// must not send its Hub token to the CDN).
func (s *Server) CDNAuthorized() int {
	st := s.state()
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, v := range st.authOn {
		n += v
	}
	return n
}

// take returns the first fault matching the request and consumes one use of it.
func (st *faultState) take(r Route, path string) *Fault {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reqs[fmt.Sprint(r, " ", path)]++
	var f *Fault
	f, st.faults = takeFault(st.faults, func(f *Fault) *int { return &f.Count },
		func(f *Fault) bool { return f.Route == r && (f.Path == "" || f.Path == path) })
	return f
}

// takeFault consumes one use of the first fault match accepts and returns it with the list
// left after it: a positive count is decremented and the fault dropped at zero, a negative
// count never runs out (registration turns a 0 count into 1). Shared by the download and
// publish fault lists.
func takeFault[F any](faults []*F, count func(*F) *int, match func(*F) bool) (*F, []*F) {
	for i, f := range faults {
		if !match(f) {
			continue
		}
		if c := count(f); *c > 0 {
			*c--
			if *c == 0 {
				faults = append(faults[:i:i], faults[i+1:]...)
			}
		}
		return f, faults
	}
	return nil, faults
}

// serveDownload answers the download routes; false means "not mine".
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request) bool {
	if s.down.Load() {
		dropConnection(w)
		return true
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.EscapedPath()
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, sgm := range segs {
		u, err := url.PathUnescape(sgm)
		if err != nil {
			return false
		}
		segs[i] = u
	}
	switch {
	case len(segs) == 2 && segs[0] == "_hubtest" && segs[1] == "served" && r.Method == http.MethodGet:
		// Test introspection for out-of-process tests: content bytes sent per path.
		st := s.state()
		st.mu.Lock()
		m := map[string]int64{}
		for k, v := range st.served {
			m[k] = v
		}
		st.mu.Unlock()
		writeJSON(w, m)
		return true
	case len(segs) == 2 && segs[0] == "cdn-lfs" && r.Method == http.MethodGet:
		s.serveCDN(w, r, segs[1])
		return true
	case len(segs) >= 4 && segs[0] == "api" && r.Method == http.MethodGet:
		repoType, ok := typeFromPlural(segs[1])
		if !ok {
			return false
		}
		id := segs[2] + "/" + segs[3]
		rest := segs[4:]
		switch {
		case len(rest) == 0:
			s.serveInfo(w, r, repoType, id, "main")
		case len(rest) == 2 && rest[0] == "revision":
			s.serveInfo(w, r, repoType, id, rest[1])
		case len(rest) >= 2 && rest[0] == "tree":
			s.serveTree(w, r, repoType, id, rest[1], strings.Join(rest[2:], "/"))
		case len(rest) == 1 && rest[0] == "refs":
			s.serveRefs(w, r, repoType, id)
		default:
			return false
		}
		return true
	}
	repoType := "model"
	if len(segs) > 0 {
		if t, ok := typeFromPlural(segs[0]); ok && len(segs) >= 6 && segs[3] == "resolve" {
			repoType = t
			segs = segs[1:]
		}
	}
	if len(segs) >= 5 && segs[2] == "resolve" {
		s.serveResolve(w, r, repoType, segs[0]+"/"+segs[1], segs[3], strings.Join(segs[4:], "/"))
		return true
	}
	return false
}

func typeFromPlural(p string) (string, bool) {
	switch p {
	case "models", "datasets", "spaces", "kernels":
		return strings.TrimSuffix(p, "s"), true
	}
	return "", false
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// authorize applies the Hub's rules for private and gated repositories: without a valid
// token a private repo looks missing (401 RepoNotFound) and a gated one answers
// 401 GatedRepo, or 403 GatedRepo for a token that was not granted access.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, repo *Repo) bool {
	if !repo.Private && !repo.Gated {
		return true
	}
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.Token != "" && got == s.Token {
		return true
	}
	switch {
	case repo.Gated && got == "":
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repo.ID+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
	case repo.Gated:
		hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+repo.ID+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+repo.ID+" to ask for access.")
	default:
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
	}
	return false
}

// resolveRepo finds repo and commit or writes the Hub's error answer.
func (s *Server) resolveRepo(w http.ResponseWriter, r *http.Request, repoType, id, rev string) (*Repo, *Commit, bool) {
	repo := s.Store.Repo(repoType, id)
	if repo == nil {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return nil, nil, false
	}
	if !s.authorize(w, r, repo) {
		return nil, nil, false
	}
	_, c, err := s.Store.Resolve(repoType, id, rev)
	if err != nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, nil, false
	}
	return repo, c, true
}

// lfsPointer is the git-lfs pointer text stored in git for an LFS file; its git sha1
// is the "oid"/"blobId" the Hub lists for LFS files.
func lfsPointer(f File) []byte {
	return []byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", f.SHA256(), len(f.Data)))
}

func blobID(f File) string {
	if f.LFS {
		return File{Data: lfsPointer(f)}.GitSHA1()
	}
	return f.GitSHA1()
}

func sortedPaths(c *Commit) []string {
	names := make([]string, 0, len(c.Files))
	for n := range c.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *Server) apiFault(w http.ResponseWriter, path string) bool {
	answered, _ := s.apiFaultOf(w, nil, path)
	return answered
}

// apiFaultOf is apiFault that also returns a fault it left to the caller (echo, size).
func (s *Server) apiFaultOf(w http.ResponseWriter, r *http.Request, path string) (bool, *Fault) {
	f := s.state().take(RouteAPI, path)
	if f == nil {
		return false, nil
	}
	if f.Kind == FaultEcho && r != nil && (f.Where == "body" || f.Where == "message") {
		tok := bearer(r)
		if f.Where == "body" {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "%s you sent %s", strings.Repeat("-", 486), tok)
		} else {
			hubError(w, http.StatusBadRequest, "", "bad token "+tok)
		}
		return true, nil
	}
	return s.applyHeaderFault(w, f), f
}

func bearer(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// takeAny consumes the first fault of route for path (or any path) that match accepts.
func (st *faultState) takeAny(r Route, path string, match func(*Fault) bool) *Fault {
	st.mu.Lock()
	defer st.mu.Unlock()
	var f *Fault
	f, st.faults = takeFault(st.faults, func(f *Fault) *int { return &f.Count },
		func(f *Fault) bool { return f.Route == r && (f.Path == "" || f.Path == path) && match(f) })
	return f
}

// applyHeaderFault handles faults that replace the whole answer; true means answered.
func (s *Server) applyHeaderFault(w http.ResponseWriter, f *Fault) bool {
	if f.Hook != nil {
		go f.Hook()
	}
	switch f.Kind {
	case FaultStatus:
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		hubError(w, f.Status, "", http.StatusText(f.Status))
		return true
	case FaultCut, FaultDown:
		if f.Kind == FaultDown {
			s.down.Store(true)
		}
		dropConnection(w)
		return true
	}
	return false
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, repoType, id, rev string) {
	answered, echo := s.apiFaultOf(w, r, "")
	if answered {
		return
	}
	repo, c, ok := s.resolveRepo(w, r, repoType, id, rev)
	if !ok {
		return
	}
	blobs := r.URL.Query().Get("blobs") == "true" || r.URL.Query().Get("blobs") == "True"
	siblings := []map[string]any{}
	for _, p := range sortedPaths(c) {
		f := c.Files[p]
		sib := map[string]any{"rfilename": p}
		if blobs {
			size := int64(len(f.Data))
			if lie := s.state().takeAny(RouteAPI, p, func(f *Fault) bool { return f.Kind == FaultStatedSize && f.Path != "" }); lie != nil {
				size = lie.Size
			}
			sib["size"] = size
			sib["blobId"] = blobID(f)
			if f.LFS {
				sib["lfs"] = map[string]any{"sha256": f.SHA256(), "size": size, "pointerSize": len(lfsPointer(f))}
			}
		}
		siblings = append(siblings, sib)
	}
	sha := c.SHA
	if echo != nil && echo.Kind == FaultEcho {
		switch echo.Where {
		case "sha":
			sha = "sha-" + bearer(r)
		case "path":
			siblings = append(siblings, map[string]any{"rfilename": "config-" + bearer(r) + ".json", "size": 2, "blobId": c.SHA})
		}
	}
	gated := any(false)
	if repo.Gated {
		gated = "manual"
	}
	writeJSON(w, map[string]any{
		"_id":          "hubtest-" + c.SHA[:24],
		"id":           repo.ID,
		"modelId":      repo.ID,
		"sha":          sha,
		"lastModified": time.Unix(0, 0).UTC().Format("2006-01-02T15:04:05.000Z"),
		"private":      repo.Private,
		"gated":        gated,
		"disabled":     false,
		"tags":         []string{},
		"siblings":     siblings,
	})
}

func (s *Server) serveTree(w http.ResponseWriter, r *http.Request, repoType, id, rev, under string) {
	if s.apiFault(w, "") {
		return
	}
	_, c, ok := s.resolveRepo(w, r, repoType, id, rev)
	if !ok {
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true" || r.URL.Query().Get("recursive") == "True"
	prefix := ""
	if under != "" {
		prefix = strings.TrimSuffix(under, "/") + "/"
	}
	entries := []map[string]any{}
	dirs := map[string]bool{}
	for _, p := range sortedPaths(c) {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		rel := strings.TrimPrefix(p, prefix)
		// directories on the way
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			d := prefix + strings.Join(parts[:i], "/")
			if !dirs[d] && (recursive || i == 1) {
				dirs[d] = true
				entries = append(entries, map[string]any{"type": "directory", "oid": File{Data: []byte(d)}.GitSHA1(), "size": 0, "path": d})
			}
		}
		if !recursive && len(parts) > 1 {
			continue
		}
		f := c.Files[p]
		e := map[string]any{"type": "file", "oid": blobID(f), "size": len(f.Data), "path": p}
		if f.LFS {
			e["lfs"] = map[string]any{"oid": f.SHA256(), "size": len(f.Data), "pointerSize": len(lfsPointer(f))}
		}
		entries = append(entries, e)
	}
	if prefix != "" && len(entries) == 0 {
		hubError(w, http.StatusNotFound, "EntryNotFound", under+" does not exist on \""+rev+"\"")
		return
	}
	writeJSON(w, entries)
}

// serveRefs lists a repository's branches (the store has no tags, converts or pull requests).
func (s *Server) serveRefs(w http.ResponseWriter, r *http.Request, repoType, id string) {
	if s.apiFault(w, "") {
		return
	}
	repo, _, ok := s.resolveRepo(w, r, repoType, id, "main")
	if !ok {
		return
	}
	s.Store.mu.Lock()
	names := make([]string, 0, len(repo.Branches))
	for b := range repo.Branches {
		names = append(names, b)
	}
	sort.Strings(names)
	branches := []map[string]string{}
	for _, b := range names {
		branches = append(branches, map[string]string{"name": b, "ref": "refs/heads/" + b, "targetCommit": repo.Branches[b]})
	}
	s.Store.mu.Unlock()
	empty := []map[string]string{}
	writeJSON(w, map[string]any{"branches": branches, "tags": empty, "converts": empty, "pullRequests": empty})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// cdnHost is the host name of the "CDN": a different host name for the same listener,
// so that clients treat it as off-Hub (see the file comment).
func (s *Server) cdnHost(r *http.Request) string {
	if s.CDNHost != "" {
		return s.CDNHost
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, ""
	}
	switch host {
	case "127.0.0.1":
		host = "localhost"
	default:
		host = "127.0.0.1"
	}
	if port != "" {
		return net.JoinHostPort(host, port)
	}
	return host
}

func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, repoType, id, rev, path string) {
	var hf *Fault
	if r.Method == http.MethodHead {
		if hf = s.state().take(RouteHEAD, path); hf != nil && s.applyHeaderFault(w, hf) {
			return
		}
	}
	_, c, ok := s.resolveRepo(w, r, repoType, id, rev)
	if !ok {
		return
	}
	w.Header().Set("X-Repo-Commit", c.SHA)
	if hf != nil && hf.Kind == FaultEcho && hf.Where == "commit" {
		w.Header().Set("X-Repo-Commit", "commit-"+bearer(r))
	}
	// headerFaults change the HEAD's headers once the regular ones are set.
	headerFaults := func() {
		switch {
		case hf == nil:
		case hf.Kind == FaultEcho && hf.Where == "etag":
			w.Header().Set("ETag", `"etag-`+bearer(r)+`"`)
			w.Header().Del("X-Linked-Etag")
		case hf.Kind == FaultStatedSize:
			if w.Header().Get("X-Linked-Size") != "" {
				w.Header().Set("X-Linked-Size", strconv.FormatInt(hf.Size, 10))
			} else {
				w.Header().Set("Content-Length", strconv.FormatInt(hf.Size, 10))
			}
		}
	}
	f, ok := c.Files[path]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", path+" does not exist on \""+rev+"\"")
		return
	}
	if f.LFS {
		sha := f.SHA256()
		// The signed-URL query stands in for the real CDN's signature; it also lets the
		// CDN map the blob back to a repository path for the byte counters.
		loc := "http://" + s.cdnHost(r) + "/cdn-lfs/" + sha + "?X-Amz-Signature=hubtest&path=" + url.QueryEscape(path)
		w.Header().Set("ETag", `"`+sha+`"`)
		w.Header().Set("X-Linked-Etag", `"`+sha+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		w.Header().Set("Location", loc)
		headerFaults()
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+f.GitSHA1()+`"`)
	if r.Method == http.MethodHead {
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.Data)))
		headerFaults()
		w.WriteHeader(http.StatusOK)
		return
	}
	s.serveContent(w, r, path, f.Data)
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request, sha string) {
	path := r.URL.Query().Get("path")
	if r.Header.Get("Authorization") != "" {
		st := s.state()
		st.mu.Lock()
		st.authOn[path]++
		st.mu.Unlock()
	}
	data, ok := s.findBlob(sha)
	if !ok {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	sum := md5.Sum(data)
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
	s.serveContent(w, r, path, data)
}

// findBlob looks an LFS object up by sha256 across the store.
func (s *Server) findBlob(sha string) ([]byte, bool) {
	s.Store.mu.Lock()
	defer s.Store.mu.Unlock()
	for _, repo := range s.Store.repos {
		for _, c := range repo.Commits {
			for _, f := range c.Files {
				if f.LFS && f.SHA256() == sha {
					return f.Data, true
				}
			}
		}
	}
	return nil, false
}

// serveContent writes data honouring a single "bytes=N-" or "bytes=N-M" Range, with
// the content faults applied.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, path string, data []byte) {
	st := s.state()
	f := st.take(RouteContent, path)
	if f != nil && f.Kind == FaultStatus {
		s.applyHeaderFault(w, f)
		return
	}
	if f != nil && f.Hook != nil {
		go f.Hook()
	}
	if f != nil && (f.Kind == FaultCut || f.Kind == FaultDown) && f.After == 0 {
		if f.Kind == FaultDown {
			s.down.Store(true)
		}
		dropConnection(w) // before any answer
		return
	}
	if f != nil && f.Kind == FaultTooLong {
		data = append(bytes.Clone(data), bytes.Repeat([]byte{'x'}, 4096)...)
	}
	if f != nil && f.Kind == FaultWrongContent {
		data = bytes.Clone(data)
		if len(data) > 0 {
			data[len(data)/2] ^= 0xff
		}
	}
	start, end := int64(0), int64(len(data))
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && !(f != nil && (f.Kind == FaultIgnoreRange || f.Kind == FaultShortWhole)) {
		a, b, ok := parseRange(rg, int64(len(data)))
		if !ok {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start, end, status = a, b, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b-1, len(data)))
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Length", strconv.FormatInt(end-start, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(status)
	body := data[start:end]
	limit := int64(len(body))
	if f != nil && (f.Kind == FaultCut || f.Kind == FaultDown || f.Kind == FaultStall || f.Kind == FaultShortWhole) && f.After < limit {
		limit = f.After
	}
	// Count before writing (and take back what was not written), so the counter never
	// lags behind what a client has already received.
	st.mu.Lock()
	st.served[path] += limit
	st.mu.Unlock()
	n := s.write(w, r, body[:limit])
	st.mu.Lock()
	st.served[path] -= limit - n
	st.mu.Unlock()
	if f == nil || limit == int64(len(body)) {
		return
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	switch f.Kind {
	case FaultStall:
		<-r.Context().Done()
	case FaultDown:
		s.down.Store(true)
		dropConnection(w)
	default:
		dropConnection(w)
	}
}

// parseRange parses "bytes=a-" and "bytes=a-b" into [start, end).
func parseRange(h string, size int64) (int64, int64, bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	as, bs, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, false
	}
	a, err := strconv.ParseInt(as, 10, 64)
	if err != nil || a < 0 || a >= size {
		return 0, 0, false
	}
	end := size
	if bs != "" {
		b, err := strconv.ParseInt(bs, 10, 64)
		if err != nil || b < a {
			return 0, 0, false
		}
		if b+1 < end {
			end = b + 1
		}
	}
	return a, end, true
}

// dropConnection closes the connection under a handler without a proper answer, as a
// crashed server or a cut network would.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			// A plain close (FIN after the bytes already written, not an RST that
			// would discard them) so the client holds exactly what was counted.
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// write sends b, at most Rate bytes per second when Rate is set (progress-bar checks).
func (s *Server) write(w http.ResponseWriter, r *http.Request, b []byte) int64 {
	if s.Rate <= 0 {
		n, _ := w.Write(b)
		return int64(n)
	}
	chunk := max(s.Rate/20, 1)
	var sent int64
	for len(b) > 0 {
		k := min(int64(len(b)), chunk)
		n, err := w.Write(b[:k])
		sent += int64(n)
		if err != nil {
			return sent
		}
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		b = b[k:]
		select {
		case <-r.Context().Done():
			return sent
		case <-time.After(50 * time.Millisecond):
		}
	}
	return sent
}
