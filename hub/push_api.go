package hub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Publishing errors; each push error wraps one of these (test with errors.Is) and,
// for HTTP failures, a *StatusError (errors.As).
var (
	// ErrUnauthorized: the Hub did not accept the token (HTTP 401) or there is none.
	ErrUnauthorized = errors.New("hub: not authenticated")
	// ErrForbidden: the token may not write there, or kernel publishing is not granted (HTTP 403).
	ErrForbidden = errors.New("hub: not allowed")
	// ErrCommitRejected: the Hub refused a commit; nothing of that commit was published.
	ErrCommitRejected = errors.New("hub: commit rejected")
)

const (
	// kernelsAccessURL is where kernel publishing access is requested
	// (kernel-builder/src/upload.rs, KERNELS_COMMUNITY_URL).
	kernelsAccessURL = "https://huggingface.co/spaces/kernels-community/README/discussions/new"
	authHint         = "set HF_TOKEN to a token with write access, or run `huggingface-cli login` (`hf auth login`)"
	// repoTypeKernel and its URL segment: huggingface_hub constants.py REPO_TYPE_KERNEL
	// and REPO_TYPES_URL_PREFIXES ("kernels/"); API paths are /api/{repo_type}s/{repo}/…
	// (hf_api.py create_branch, _commit_api.py _fetch_upload_modes / _send_commit).
	repoTypeKernel = "kernel"
	kernelsSegment = "kernels"
)

// preuploadChunk is how many files one preupload request carries
// (huggingface_hub _commit_api.py _fetch_upload_modes: chunk_iterable(additions, 256)).
const preuploadChunk = 256

// versionBranch is the branch naming rule for kernel versions (DESIGN: code on v<N>).
var versionBranch = regexp.MustCompile(`^v(0|[1-9][0-9]*)$`)

// Model repositories (packed weights): huggingface_hub constants.py REPO_TYPE_MODEL, whose
// URLs carry no type prefix.
const repoTypeModel = "model"

// pusher carries one push's client, repository and log.
type pusher struct {
	c        *Client
	repo     string // "org/name"
	repoType string // repoTypeKernel or repoTypeModel
	log      io.Writer
}

// segment is the repo type's part of API paths: /api/{repo_type}s/{repo}/... (hf_api.py).
func (p *pusher) segment() string { return p.repoType + "s" }

func (p *pusher) apiURL(action, rev string) string {
	u := p.c.Endpoint + "/api/" + p.segment() + "/" + p.repo + "/" + action
	if rev != "" {
		u += "/" + url.PathEscape(rev)
	}
	return u
}

// send makes one request (retried by Client.Do on 5xx, 429 and dropped connections;
// the body is a bytes.Reader so http.NewRequest sets GetBody and retries can replay it).
func (p *pusher) send(ctx context.Context, method, u, contentType string, body []byte, hdr map[string]string) (*http.Response, []byte, error) {
	var open func() (io.ReadCloser, error)
	if body != nil {
		open = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return p.sendFrom(ctx, method, u, contentType, open, int64(len(body)), hdr)
}

// sendFrom is send with a body of n bytes read from open, called again for each retry (a
// file section: large uploads are streamed, never held in memory).
func (p *pusher) sendFrom(ctx context.Context, method, u, contentType string, open func() (io.ReadCloser, error), n int64, hdr map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("hub: %s %s: %w", method, u, err)
	}
	if open != nil {
		body, err := open()
		if err != nil {
			return nil, nil, err
		}
		req.Body, req.GetBody, req.ContentLength = body, open, n
		if n == 0 {
			req.Body = http.NoBody
		}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := p.c.Do(ctx, req)
	if err != nil {
		return nil, nil, p.wrapStatus(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("hub: %s %s: reading the answer: %w", method, req.URL.Redacted(), err)
	}
	return resp, b, nil
}

// wrapStatus turns the *StatusError Client.Do returns after exhausting retries into
// the push error, keeping the StatusError in the chain.
func (p *pusher) wrapStatus(err error) error {
	var se *StatusError
	if errors.As(err, &se) {
		return fmt.Errorf("hub: the Hub kept failing (HTTP %d) after retries; nothing more was sent: %w", se.Status, err)
	}
	return err
}

// statusError builds the error for a non-2xx answer: the Hub's own message
// (X-Error-Message header, else the JSON "error" field, else the body start) and
// what to do about 401/403. The token never appears: it is only in a request header.
func (p *pusher) statusError(resp *http.Response, body []byte) error {
	msg := hubMessage(resp, body) // the token was redacted from the answer as it came in (secret.go)
	se := &StatusError{Method: resp.Request.Method, URL: resp.Request.URL.Redacted(), Status: resp.StatusCode, Body: msg}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		if p.c.Token == "" {
			return fmt.Errorf("%w: no token found: %s: %w", ErrUnauthorized, authHint, se)
		}
		return fmt.Errorf("%w: the Hub did not accept the token: %s: %w", ErrUnauthorized, authHint, se)
	case http.StatusForbidden:
		return fmt.Errorf("%w: the token may not publish %s: use a token with write access to %q; publishing kernels also needs approval, request it at %s: %w",
			ErrForbidden, p.repo, namespace(p.repo), kernelsAccessURL, se)
	}
	return se
}

func namespace(repo string) string { ns, _, _ := strings.Cut(repo, "/"); return ns }

func hubMessage(resp *http.Response, body []byte) string {
	if m := resp.Header.Get("X-Error-Message"); m != "" {
		return m
	}
	var e struct {
		Error any `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		if s, ok := e.Error.(string); ok {
			return s
		}
		if b, err := json.Marshal(e.Error); err == nil {
			return string(b)
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func ok2xx(resp *http.Response) bool { return resp.StatusCode >= 200 && resp.StatusCode < 300 }

// createRepo: POST /api/repos/create {"name","organization","type","private"}
// (hf_api.py create_repo; DESIGN "Hub commit API"). 409 means it exists, which is fine.
func (p *pusher) createRepo(ctx context.Context, private bool) (created bool, err error) {
	org, name, _ := strings.Cut(p.repo, "/")
	body, _ := json.Marshal(map[string]any{"name": name, "organization": org, "type": p.repoType, "private": private})
	resp, b, err := p.send(ctx, http.MethodPost, p.c.Endpoint+"/api/repos/create", "application/json", body, nil)
	if err != nil {
		return false, err
	}
	switch {
	case resp.StatusCode == http.StatusConflict:
		return false, nil
	case !ok2xx(resp):
		return false, fmt.Errorf("hub: creating %s repo %s: %w", p.repoType, p.repo, p.statusError(resp, b))
	}
	return true, nil
}

// createBranch: POST /api/kernels/{repo}/branch/{branch} (hf_api.py create_branch);
// 409 means it exists (create_branch exist_ok).
func (p *pusher) createBranch(ctx context.Context, branch string) (created bool, err error) {
	resp, b, err := p.send(ctx, http.MethodPost, p.apiURL("branch", branch), "application/json", []byte("{}"), nil)
	if err != nil {
		return false, err
	}
	switch {
	case resp.StatusCode == http.StatusConflict:
		return false, nil
	case !ok2xx(resp):
		return false, fmt.Errorf("hub: creating branch %s of %s: %w", branch, p.repo, p.statusError(resp, b))
	}
	return true, nil
}

// treeEntry is one entry of GET /api/{type}s/{repo}/tree/{rev} (hf_api.py list_repo_tree:
// {"type","path","oid","size","lfs":{"oid","size"}}).
type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Oid  string `json:"oid"`
	Size int64  `json:"size"`
	LFS  *struct {
		Oid  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// sameContent reports whether the remote entry holds f's content: LFS entries by
// sha256, regular ones by git blob id (huggingface_hub skips such no-op additions,
// hf_api.py create_commit "operations_without_no_op").
func (e treeEntry) sameContent(f PackageFile) bool {
	if e.LFS != nil {
		return e.LFS.Oid == f.SHA256() && e.LFS.Size == f.Size()
	}
	return e.Oid != "" && e.Oid == f.GitSHA1()
}

// listTree lists every file of a revision, following the Link rel="next" pagination
// the Hub uses (huggingface_hub utils/_pagination.py), as kernel-builder does before
// uploading (upload.rs: list_tree().recursive(true)).
func (p *pusher) listTree(ctx context.Context, rev string) (map[string]treeEntry, error) {
	files := map[string]treeEntry{}
	next := p.apiURL("tree", rev) + "?recursive=true"
	for pages := 0; next != ""; pages++ {
		if pages > 10000 {
			return nil, fmt.Errorf("hub: listing %s@%s: more than 10000 pages", p.repo, rev)
		}
		resp, b, err := p.send(ctx, http.MethodGet, next, "", nil, nil)
		if err != nil {
			return nil, err
		}
		if !ok2xx(resp) {
			return nil, fmt.Errorf("hub: listing files of %s@%s: %w", p.repo, rev, p.statusError(resp, b))
		}
		var page []treeEntry
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("hub: listing files of %s@%s: malformed answer: %w", p.repo, rev, err)
		}
		for _, e := range page {
			if e.Type == "file" {
				files[e.Path] = e
			}
		}
		next, err = nextLink(resp, next)
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// nextLink returns the rel="next" target of a Link header, resolved against base.
func nextLink(resp *http.Response, base string) (string, error) {
	for _, h := range resp.Header.Values("Link") {
		for _, part := range strings.Split(h, ",") {
			target, params, ok := strings.Cut(part, ";")
			if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
				continue
			}
			target = strings.Trim(strings.TrimSpace(target), "<>")
			bu, err := url.Parse(base)
			if err != nil {
				return "", err
			}
			tu, err := bu.Parse(target)
			if err != nil {
				return "", fmt.Errorf("hub: bad Link header %q: %w", h, err)
			}
			return tu.String(), nil
		}
	}
	return "", nil
}

// revisionSHA is the commit a branch points at: GET /api/kernels/{repo}/revision/{rev}
// → {"sha"} (hf_api.py repo_info).
func (p *pusher) revisionSHA(ctx context.Context, rev string) (string, error) {
	resp, b, err := p.send(ctx, http.MethodGet, p.apiURL("revision", rev), "", nil, nil)
	if err != nil {
		return "", err
	}
	if !ok2xx(resp) {
		return "", fmt.Errorf("hub: revision %s of %s: %w", rev, p.repo, p.statusError(resp, b))
	}
	var info struct {
		SHA string `json:"sha"`
	}
	if err := json.Unmarshal(b, &info); err != nil || info.SHA == "" {
		return "", fmt.Errorf("hub: revision %s of %s: answer without sha", rev, p.repo)
	}
	return info.SHA, nil
}

// uploadMode is the preupload answer for one file.
type uploadMode struct {
	Path         string `json:"path"`
	UploadMode   string `json:"uploadMode"`
	ShouldIgnore bool   `json:"shouldIgnore"`
	Oid          string `json:"oid"`
}

// preupload asks the Hub how each file is to be uploaded: POST
// /api/kernels/{repo}/preupload/{rev} {"files":[{"path","sample"(base64 of the first
// 512 bytes),"size"}]} → {"files":[{"path","uploadMode":"regular"|"lfs","shouldIgnore"}]}
// (_commit_api.py _fetch_upload_modes and _validate_preupload_info). Empty files are
// always regular (S3 refuses empty objects; same place).
func (p *pusher) preupload(ctx context.Context, rev string, files []PackageFile) (map[string]uploadMode, error) {
	modes := map[string]uploadMode{}
	for start := 0; start < len(files); start += preuploadChunk {
		chunk := files[start:min(start+preuploadChunk, len(files))]
		type pf struct {
			Path   string `json:"path"`
			Sample string `json:"sample"`
			Size   int64  `json:"size"`
		}
		req := struct {
			Files []pf `json:"files"`
		}{}
		for _, f := range chunk {
			req.Files = append(req.Files, pf{Path: f.Path, Sample: base64.StdEncoding.EncodeToString(f.Sample()), Size: f.Size()})
		}
		body, _ := json.Marshal(req)
		resp, b, err := p.send(ctx, http.MethodPost, p.apiURL("preupload", rev), "application/json", body, nil)
		if err != nil {
			return nil, err
		}
		if !ok2xx(resp) {
			return nil, fmt.Errorf("hub: asking upload modes for %s@%s: %w", p.repo, rev, p.statusError(resp, b))
		}
		var ans struct {
			Files []uploadMode `json:"files"`
		}
		if err := json.Unmarshal(b, &ans); err != nil {
			return nil, fmt.Errorf("hub: preupload answer for %s@%s is malformed: %w", p.repo, rev, err)
		}
		for _, m := range ans.Files {
			if m.UploadMode != "regular" && m.UploadMode != "lfs" {
				return nil, fmt.Errorf("hub: preupload answer for %s@%s: file %q has upload mode %q (want regular or lfs)", p.repo, rev, m.Path, m.UploadMode)
			}
			modes[m.Path] = m
		}
		for _, f := range chunk {
			m, ok := modes[f.Path]
			if !ok {
				return nil, fmt.Errorf("hub: preupload answer for %s@%s says nothing about %q", p.repo, rev, f.Path)
			}
			if f.Size() == 0 {
				m.UploadMode = "regular"
				modes[f.Path] = m
			}
		}
	}
	return modes, nil
}

// commitOp is one line of a commit.
type commitOp struct {
	Kind string // "file", "lfsFile", "deletedFile"
	Path string
	File *PackageFile // for additions
}

// commitPayload is the NDJSON body of POST /api/{type}s/{repo}/commit/{rev}: a header
// line {"key":"header","value":{"summary","description"}}, then one line per
// operation (_commit_api.py _prepare_commit_payload; DESIGN "Hub commit API").
func commitPayload(summary, description string, ops []commitOp) ([]byte, error) {
	var buf bytes.Buffer
	line := func(key string, value any) {
		b, _ := json.Marshal(map[string]any{"key": key, "value": value})
		buf.Write(b)
		buf.WriteByte('\n')
	}
	line("header", map[string]string{"summary": summary, "description": description})
	for _, op := range ops {
		switch op.Kind {
		case "file":
			data, err := op.File.Content()
			if err != nil {
				return nil, err
			}
			line("file", map[string]string{"content": base64.StdEncoding.EncodeToString(data), "path": op.Path, "encoding": "base64"})
		case "lfsFile":
			line("lfsFile", map[string]any{"path": op.Path, "algo": "sha256", "oid": op.File.SHA256(), "size": op.File.Size()})
		case "deletedFile":
			line("deletedFile", map[string]string{"path": op.Path})
		}
	}
	return buf.Bytes(), nil
}

// commit sends the commit (Content-Type application/x-ndjson, _commit_api.py _send_commit)
// and returns the new commit id. Any non-2xx answer is ErrCommitRejected: the Hub applies
// a commit whole or not at all, so nothing of it is published.
func (p *pusher) commit(ctx context.Context, rev, summary, description string, ops []commitOp) (string, error) {
	body, err := commitPayload(summary, description, ops)
	if err != nil {
		return "", err
	}
	resp, b, err := p.send(withKind(ctx, kindCommit), http.MethodPost, p.apiURL("commit", rev), "application/x-ndjson", body, nil)
	if err != nil {
		if ctx.Err() != nil {
			// Cancelled: the Hub may or may not have applied it; it did not refuse it.
			return "", fmt.Errorf("hub: interrupted while committing to %s@%s (the commit may or may not have been applied): %w", p.repo, rev, err)
		}
		return "", fmt.Errorf("%w: committing to %s@%s: %w", ErrCommitRejected, p.repo, rev, err)
	}
	if !ok2xx(resp) {
		return "", fmt.Errorf("%w: committing to %s@%s: %w", ErrCommitRejected, p.repo, rev, p.statusError(resp, b))
	}
	var ans struct {
		CommitOid string `json:"commitOid"`
		CommitURL string `json:"commitUrl"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || ans.CommitOid == "" {
		return "", fmt.Errorf("%w: committing to %s@%s: the Hub answered HTTP %d without a commit id", ErrCommitRejected, p.repo, rev, resp.StatusCode)
	}
	return ans.CommitOid, nil
}
