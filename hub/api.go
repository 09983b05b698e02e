package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// RepoFile is one file of a revision as the Hub lists it.
type RepoFile struct {
	Path   string
	Size   int64  // -1 when the listing did not say
	BlobID string // git blob id ("" when not listed)
	SHA256 string // LFS files only
	LFS    bool
}

// RevisionInfo is what GET /api/{type}s/{repo}/revision/{rev}?blobs=true says
// (huggingface_hub hf_api.py: model_info, ModelInfo "sha" and "siblings").
type RevisionInfo struct {
	Repo   string
	Commit string
	Files  []RepoFile
}

// Auth and lookup failures, for errors.Is.
var (
	ErrAuth             = errors.New("hub: authentication required or access not granted")
	ErrRepoNotFound     = errors.New("hub: repository not found")
	ErrRevisionNotFound = errors.New("hub: revision not found")
	ErrEntryNotFound    = errors.New("hub: file not found in the repository")
)

// urlPrefix is the path prefix of a repository type (constants.py REPO_TYPES_URL_PREFIXES).
func urlPrefix(repoType string) string {
	switch repoType {
	case "dataset", "space", "kernel":
		return repoType + "s/"
	}
	return ""
}

func normType(t string) string {
	if t == "" {
		return "model"
	}
	return t
}

// ResolveURL is {endpoint}/{prefix}{repo}/resolve/{revision}/{path}, with the revision
// quoted whole and the path per segment (file_download.py: hf_hub_url).
func (c *Client) ResolveURL(repoType, repo, revision, path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.Endpoint + "/" + urlPrefix(repoType) + repo + "/resolve/" + url.PathEscape(revision) + "/" + strings.Join(segs, "/")
}

// RevisionInfo resolves a revision to its commit and lists its files.
func (c *Client) RevisionInfo(ctx context.Context, repoType, repo, revision string) (*RevisionInfo, error) {
	repoType = normType(repoType)
	u := c.Endpoint + "/api/" + repoType + "s/" + repo + "/revision/" + url.PathEscape(revision) + "?blobs=true"
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("hub: %s: %w", repo, err)
	}
	resp, err := c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.httpError(resp, repo, revision, "")
	}
	var body struct {
		ID       string `json:"id"`
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	// Listings of large repositories are a few MB; 64 MiB bounds a hostile answer.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("hub: %s@%s: revision info: %w", repo, revision, err)
	}
	if !commitPattern.MatchString(body.SHA) {
		return nil, fmt.Errorf("hub: %s@%s: revision info has no commit sha (got %q)", repo, revision, body.SHA)
	}
	info := &RevisionInfo{Repo: repo, Commit: body.SHA}
	for _, s := range body.Siblings {
		f := RepoFile{Path: s.RFilename, Size: -1, BlobID: s.BlobID}
		if s.Size != nil {
			f.Size = *s.Size
		}
		if s.LFS != nil {
			f.LFS, f.SHA256, f.Size = true, strings.ToLower(s.LFS.SHA256), s.LFS.Size
		}
		if err := checkRepoPath(f.Path); err != nil {
			return nil, fmt.Errorf("hub: %s@%s: listing: %w", repo, revision, err)
		}
		info.Files = append(info.Files, f)
	}
	return info, nil
}

// checkRepoPath rejects listed paths that would escape the snapshot folder.
func checkRepoPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, `\`) || strings.ContainsRune(p, 0) {
		return fmt.Errorf("unsafe file path %q", p)
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." || s == ".." {
			return fmt.Errorf("unsafe file path %q", p)
		}
	}
	return nil
}

// FileMeta is what the resolve HEAD says about a file (file_download.py:
// get_hf_file_metadata): the commit, the etag that names the blob (X-Linked-Etag of
// an LFS redirect, else ETag, normalized), the size and where to download from.
type FileMeta struct {
	Commit   string
	Etag     string
	Size     int64 // -1 when unknown
	Location string
	LFS      bool // the answer was a redirect off the Hub (a linked LFS object)
}

// FileMetadata sends HEAD resolve without following redirects that leave the Hub, so
// the LFS headers are read from the Hub's own answer, not the CDN's.
func (c *Client) FileMetadata(ctx context.Context, repoType, repo, revision, path string) (FileMeta, error) {
	u := c.ResolveURL(repoType, repo, revision, path)
	hc := *c.HTTP
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cc := *c
	cc.HTTP = &hc
	for hops := 0; ; hops++ {
		req, err := http.NewRequest(http.MethodHead, u, nil)
		if err != nil {
			return FileMeta{}, fmt.Errorf("hub: %s: %w", path, err)
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := cc.Do(ctx, req)
		if err != nil {
			return FileMeta{}, err
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return FileMeta{}, c.httpError(resp, repo, revision, path)
		}
		loc := resp.Header.Get("Location")
		redirect := resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != ""
		var target *url.URL
		if redirect {
			if target, err = resp.Request.URL.Parse(loc); err != nil {
				return FileMeta{}, fmt.Errorf("hub: %s: bad redirect location: %w", path, err)
			}
			if sameHost(resp.Request.URL, target) && hops < 20 {
				u = target.String()
				continue
			}
		}
		m := FileMeta{Commit: resp.Header.Get("X-Repo-Commit"), Size: -1, Location: u}
		m.Etag = normalizeEtag(cmp.Or(resp.Header.Get("X-Linked-Etag"), resp.Header.Get("ETag")))
		if n, err := strconv.ParseInt(resp.Header.Get("X-Linked-Size"), 10, 64); err == nil {
			m.Size = n
		} else if !redirect {
			if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil {
				m.Size = n
			}
		}
		if redirect {
			m.Location, m.LFS = target.String(), true
		}
		if m.Commit == "" {
			return FileMeta{}, fmt.Errorf("hub: HEAD %s: no X-Repo-Commit header: not a Hugging Face Hub endpoint (check HF_ENDPOINT)", redact(u))
		}
		if m.Etag == "" {
			return FileMeta{}, fmt.Errorf("hub: HEAD %s: no ETag: cannot name the blob", redact(u))
		}
		if err := checkEtag(m.Etag); err != nil {
			return FileMeta{}, fmt.Errorf("hub: HEAD %s: %w", redact(u), err)
		}
		return m, nil
	}
}

// normalizeEtag strips W/ and quotes as file_download.py _normalize_etag does
// (etag.lstrip("W/").strip('"')).
func normalizeEtag(e string) string {
	return strings.Trim(strings.TrimLeft(e, "W/"), `"`)
}

// checkEtag rejects etags that cannot be a blob file name.
func checkEtag(e string) error {
	if e == "." || e == ".." || strings.ContainsAny(e, "/\\\x00") || len(e) > 200 {
		return fmt.Errorf("unusable etag %q", e)
	}
	return nil
}

func sameHost(a, b *url.URL) bool { return strings.EqualFold(a.Hostname(), b.Hostname()) }

func redact(u string) string {
	if p, err := url.Parse(u); err == nil {
		p.RawQuery = ""
		return p.Redacted()
	}
	return u
}

// httpError turns a Hub error answer into an error that says what to do; the token is
// never part of it.
func (c *Client) httpError(resp *http.Response, repo, revision, path string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	se := &StatusError{Method: resp.Request.Method, URL: redact(resp.Request.URL.String()), Status: resp.StatusCode,
		Body: cmp.Or(resp.Header.Get("X-Error-Message"), strings.TrimSpace(string(body)))}
	what := repo + "@" + revision
	if path != "" {
		what += ": " + path
	}
	code := resp.Header.Get("X-Error-Code")
	switch {
	case code == "GatedRepo" || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		how := "set HF_TOKEN to a token with read access (or run `hf auth login` / `huggingface-cli login`)"
		if c.Token != "" {
			how = "the token in use was refused: check it has read access"
		}
		return fmt.Errorf("%w: %s: HTTP %d (gated, private or missing repository): %s, and accept the license on https://huggingface.co/%s if it is gated: %w",
			ErrAuth, what, resp.StatusCode, how, repo, se)
	case code == "RevisionNotFound":
		return fmt.Errorf("%w: %s: %w", ErrRevisionNotFound, what, se)
	case code == "EntryNotFound":
		return fmt.Errorf("%w: %s: %w", ErrEntryNotFound, what, se)
	case code == "RepoNotFound" || resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s: %w", ErrRepoNotFound, what, se)
	}
	return se
}

// isUnreachable says whether err means the Hub could not be reached or is down
// (connection errors, timeouts, 5xx/429 after retries, offline mode), so a cached
// snapshot may be used instead.
func isUnreachable(err error) bool {
	if errors.Is(err, ErrOffline) || errors.Is(err, errNoAnswer) {
		return true
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status >= 500 || se.Status == http.StatusTooManyRequests
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	var ue *url.Error
	return errors.As(err, &oe) || errors.As(err, &ue) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
