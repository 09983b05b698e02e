package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The cache layout and the publication order of a blob follow huggingface_hub
// (file_download.py: _hf_hub_download_to_cache_dir, _download_to_tmp_and_move,
// _chmod_and_move, _create_symlink, _cache_commit_hash_for_specific_revision):
//
//	blobs/<etag>                 LFS: sha256 (X-Linked-Etag), else the git sha1 (ETag)
//	blobs/<etag>.incomplete      our resumable partial (huggingface_hub 1.x writes
//	                             <etag>.<uuid8>.incomplete and does not resume; it
//	                             ignores ours)
//	.locks/<repo folder>/<etag>.lock
//	snapshots/<commit>/<path>    relative symlink to ../../blobs/<etag> (one more ../
//	                             per folder level in path)
//	refs/<revision>              the commit sha, no newline (Python reads it verbatim)
//
// A blob becomes visible only by renaming a verified (size, and sha256 for LFS or git
// sha1 for regular files when the listing vouches for the etag) and fsynced partial.

// FetchOptions tune Snapshot and Download.
type FetchOptions struct {
	// Include and Exclude are fnmatch globs as huggingface_hub's allow_patterns /
	// ignore_patterns. With no Include, the files a transformers model needs are taken
	// (config, generation config, tokenizer and processor files, top-level safetensors
	// and the index); for other repository types, every file.
	Include, Exclude []string
	// Workers bounds parallel file downloads; 0 means 8 (snapshot_download's default).
	Workers int
	// Progress receives per-file progress; nil for none.
	Progress ProgressSink
	// RepoType is "model" (default), "dataset", "space" or "kernel".
	RepoType string
	// Warn receives warnings (a cached snapshot used because the Hub is unreachable).
	Warn func(msg string)
}

// errLocationRefused marks a CDN answer of 401/403/410: the signed URL from the HEAD
// expired or was refused, and the Hub can be asked for a new one.
var errLocationRefused = errors.New("hub: download location refused (expired signed URL?)")

// ErrChecksum marks a download whose content does not match its announced size or hash.
var ErrChecksum = errors.New("hub: checksum mismatch")

var sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Snapshot resolves ref to a commit, downloads the selected files into the cache
// (skipping what is there), records refs/<revision> and returns the snapshot folder.
// Offline ($HF_HUB_OFFLINE), or when the Hub cannot be reached, it answers from the
// cache if the snapshot is there and complete for the selection.
func (c *Client) Snapshot(ctx context.Context, cache Cache, ref Ref, opts FetchOptions) (dir, commit string, err error) {
	repoType := normType(opts.RepoType)
	if ref.Revision == "" {
		ref.Revision = "main"
	}
	if err := checkRevision(ref.Revision); err != nil {
		return "", "", err
	}
	if c.Offline {
		return offlineSnapshot(cache, repoType, ref, opts, ErrOffline)
	}
	// With the revision cached, a Hub that is down should cost one attempt (one timeout
	// when it does not answer at all), not the full retry budget, before falling back
	// (huggingface_hub does not retry there either: utils/_http.py, retry_on_errors=False
	// "for fast fallback to cache").
	probe := c
	if _, _, lerr := cache.LocalSnapshot(repoType, ref.Repo, ref.Revision); lerr == nil && c.MaxRetries > 0 {
		cc := *c
		cc.MaxRetries = 0
		probe = &cc
	}
	info, err := probe.RevisionInfo(ctx, repoType, ref.Repo, ref.Revision)
	if err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		if isUnreachable(err) || errors.Is(err, ErrAuth) {
			d, cm, lerr := offlineSnapshot(cache, repoType, ref, opts, err)
			if lerr == nil {
				if opts.Warn != nil {
					opts.Warn(fmt.Sprintf("hub: %s: using the cached snapshot %s: %v", ref, cm, err))
				}
				return d, cm, nil
			}
			if isUnreachable(err) {
				return "", "", lerr
			}
		}
		return "", "", err
	}
	commit = info.Commit
	paths := make([]string, len(info.Files))
	byPath := map[string]RepoFile{}
	for i, f := range info.Files {
		paths[i] = f.Path
		byPath[f.Path] = f
	}
	include := opts.Include
	if len(include) == 0 && repoType != "model" {
		include = []string{"*"} // the model defaults mean nothing for kernels or datasets
	}
	sel := selectFiles(paths, include, opts.Exclude)
	if len(sel) == 0 {
		return "", "", fmt.Errorf("hub: %s (commit %s): no file matches the selection %s; the repository has %s",
			ref, commit, describeSelection(opts), listSample(paths))
	}
	if pl, ok := opts.Progress.(ProgressPlanner); ok {
		sizes := map[string]int64{}
		for _, p := range sel {
			sizes[p] = byPath[p].Size
		}
		pl.Plan(sizes)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = 8
	}
	ctx2, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, workers)
	)
	for _, p := range sel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx2.Done():
				return
			}
			defer func() { <-sem }()
			err := c.fetchFile(ctx2, cache, repoType, ref.Repo, commit, byPath[p], nil, opts.Progress)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return "", "", fmt.Errorf("hub: %s: interrupted (partial downloads are kept and resume next time): %w", ref, ctx.Err())
	}
	if firstErr != nil {
		return "", "", firstErr
	}
	root := filepath.Join(cache.Dir, RepoFolder(repoType, ref.Repo))
	if err := writeRef(root, ref.Revision, commit); err != nil {
		return "", "", err
	}
	writeCacheDirTag(cache.Dir)
	return filepath.Join(root, "snapshots", commit), commit, nil
}

// Download fetches one file of ref into the cache and returns its snapshot path.
func (c *Client) Download(ctx context.Context, cache Cache, ref Ref, path string, opts FetchOptions) (string, error) {
	repoType := normType(opts.RepoType)
	if ref.Revision == "" {
		ref.Revision = "main"
	}
	if err := checkRevision(ref.Revision); err != nil {
		return "", err
	}
	if err := checkRepoPath(path); err != nil {
		return "", fmt.Errorf("hub: %s: %w", ref, err)
	}
	local := func(cause error) (string, error) {
		dir, _, err := cache.LocalSnapshot(repoType, ref.Repo, ref.Revision)
		if err != nil {
			return "", fmt.Errorf("hub: %s: %s not cached and the Hub cannot be used (%v): %w", ref, path, cause, err)
		}
		p := filepath.Join(dir, filepath.FromSlash(path))
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("%w: %s: %s is not in the cached snapshot %s (the Hub cannot be used: %v)", ErrNotCached, ref, path, dir, cause)
		}
		return p, nil
	}
	if c.Offline {
		return local(ErrOffline)
	}
	meta, err := c.FileMetadata(ctx, repoType, ref.Repo, ref.Revision, path)
	if err != nil {
		if ctx.Err() == nil && (isUnreachable(err) || errors.Is(err, ErrAuth)) {
			if p, lerr := local(err); lerr == nil {
				return p, nil
			}
		}
		return "", err
	}
	if !commitPattern.MatchString(meta.Commit) {
		return "", fmt.Errorf("hub: %s: %s: X-Repo-Commit %q is not a commit sha", ref, path, meta.Commit)
	}
	f := RepoFile{Path: path, Size: meta.Size, LFS: meta.LFS}
	if err := c.fetchFile(ctx, cache, repoType, ref.Repo, meta.Commit, f, &meta, opts.Progress); err != nil {
		return "", err
	}
	root := filepath.Join(cache.Dir, RepoFolder(repoType, ref.Repo))
	if err := writeRef(root, ref.Revision, meta.Commit); err != nil {
		return "", err
	}
	return filepath.Join(root, "snapshots", meta.Commit, filepath.FromSlash(path)), nil
}

// fetchFile makes snapshots/<commit>/<f.Path> point at a verified blob.
func (c *Client) fetchFile(ctx context.Context, cache Cache, repoType, repo, commit string, f RepoFile, meta *FileMeta, p ProgressSink) error {
	if p == nil {
		p = nopProgress{}
	}
	root := filepath.Join(cache.Dir, RepoFolder(repoType, repo))
	pointer := filepath.Join(root, "snapshots", commit, filepath.FromSlash(f.Path))
	if st, err := os.Stat(pointer); err == nil && st.Mode().IsRegular() {
		p.FileStart(f.Path, st.Size(), st.Size())
		p.FileDone(f.Path, true, nil)
		return nil
	}
	if meta == nil {
		m, err := c.FileMetadata(ctx, repoType, repo, commit, f.Path)
		if err != nil {
			p.FileDone(f.Path, false, err)
			return err
		}
		meta = &m
	}
	fail := func(err error) error { p.FileDone(f.Path, false, err); return err }
	if meta.Commit != commit {
		return fail(fmt.Errorf("hub: %s@%s: %s: the Hub answered for commit %s", repo, commit, f.Path, meta.Commit))
	}
	size := meta.Size
	if size < 0 {
		size = f.Size
	}
	if f.Size >= 0 && meta.Size >= 0 && f.Size != meta.Size {
		return fail(fmt.Errorf("hub: %s@%s: %s: the file's answer states %d bytes, the repository listing %d; refused before downloading",
			repo, commit, f.Path, meta.Size, f.Size))
	}
	if f.LFS && f.SHA256 != "" && meta.Etag != f.SHA256 {
		return fail(fmt.Errorf("hub: %s@%s: %s: X-Linked-Etag %s differs from the listed sha256 %s", repo, commit, f.Path, meta.Etag, f.SHA256))
	}
	var want digest
	switch {
	case (meta.LFS || f.LFS) && sha256Pattern.MatchString(meta.Etag):
		want = digest{sha256: meta.Etag}
	case !meta.LFS && !f.LFS && f.BlobID != "" && f.BlobID == meta.Etag && commitPattern.MatchString(f.BlobID):
		want = digest{gitSHA1: f.BlobID}
	}
	blob := filepath.Join(root, "blobs", meta.Etag)
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return fail(fmt.Errorf("hub: %w", err))
	}
	if !isRegular(blob) {
		lockDir := filepath.Join(cache.Dir, ".locks", RepoFolder(repoType, repo))
		if err := os.MkdirAll(lockDir, 0o755); err != nil {
			return fail(fmt.Errorf("hub: %w", err))
		}
		unlock, err := lockFile(ctx, filepath.Join(lockDir, meta.Etag+".lock"))
		if err != nil {
			return fail(err)
		}
		switch {
		case isRegular(blob):
			p.FileStart(f.Path, size, size)
		default:
			if err = checkRoom(blob+".incomplete", size, f.Path); err != nil {
				break
			}
			err = c.downloadBlob(ctx, meta.Location, blob, size, want, f.Path, p)
			if errors.Is(err, errLocationRefused) && ctx.Err() == nil {
				// Signed CDN URLs expire: ask the Hub for a fresh one, once.
				var m FileMeta
				if m, err = c.FileMetadata(ctx, repoType, repo, commit, f.Path); err == nil {
					if m.Etag != meta.Etag {
						err = fmt.Errorf("hub: %s@%s: %s: etag changed from %s to %s during the download", repo, commit, f.Path, meta.Etag, m.Etag)
					} else {
						err = c.downloadBlob(ctx, m.Location, blob, size, want, f.Path, p)
					}
				}
			}
			if errors.Is(err, ErrChecksum) && ctx.Err() == nil {
				// The partial was discarded; one fresh attempt, as a bad byte in transit
				// or a bad cache node deserves a second chance but not a loop.
				err = c.downloadBlob(ctx, meta.Location, blob, size, want, f.Path, p)
			}
		}
		unlock()
		if err != nil {
			return fail(err)
		}
	} else {
		p.FileStart(f.Path, size, size)
	}
	if err := linkPointer(blob, pointer); err != nil {
		return fail(err)
	}
	p.FileDone(f.Path, false, nil)
	return nil
}

type digest struct{ sha256, gitSHA1 string }

// Bounds of one file's download.
const (
	// maxRestarts is how often a file may start over from byte 0 (a 200 to a Range
	// request, a 416, a wrong Content-Range) before the server is given up on.
	maxRestarts = 2
	// maxUnstatedSize bounds a file whose size neither the listing nor the answer states.
	maxUnstatedSize = 1 << 30
	// MinSpeed is the slowest average a file may take before its deadline, and
	// deadlineBase the time added to every file's deadline (connection, backoff).
	MinSpeed     = 256 << 10
	deadlineBase = 2 * time.Minute
)

var (
	errFileDeadline = errors.New("hub: file deadline passed")
	errTooLong      = errors.New("hub: more bytes than stated")
)

// fileDeadline is how long one file may take: deadlineBase plus its size at MinSpeed.
func (c *Client) fileDeadline(size int64) time.Duration {
	if c.FileDeadline != nil {
		return c.FileDeadline(size)
	}
	if size < 0 {
		size = 64 << 20
	}
	return deadlineBase + time.Duration(size/MinSpeed)*time.Second
}

// checkRoom refuses a stated size the disk holding partial cannot take, before any byte
// is fetched (a hostile or broken X-Linked-Size must not fill the disk).
func checkRoom(partial string, size int64, name string) error {
	if size < 0 {
		return nil
	}
	need := size
	if st, err := os.Stat(partial); err == nil && st.Size() <= size {
		need -= st.Size()
	}
	free, ok := freeBytes(filepath.Dir(partial))
	if ok && need > free {
		return fmt.Errorf("hub: %s: the server states %s (%d bytes), and %s has %s free; refused before downloading",
			name, sizeText(size), size, filepath.Dir(partial), sizeText(free))
	}
	return nil
}

// sizeText is n in decimal units, as the Hub shows sizes.
func sizeText(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n), "B"
	for _, next := range []string{"kB", "MB", "GB", "TB", "PB", "EB"} {
		if f < unit {
			break
		}
		f, u = f/unit, next
	}
	return fmt.Sprintf("%.1f %s", f, u)
}

func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// downloadBlob downloads loc into blob+".incomplete", resuming from what is there, and
// renames it to blob once complete and verified. Cancelling ctx leaves the partial.
func (c *Client) downloadBlob(ctx context.Context, loc, blob string, size int64, want digest, name string, p ProgressSink) (err error) {
	partial := blob + ".incomplete"
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", name, err)
	}
	defer f.Close()
	defer func() {
		// An empty partial is worth nothing to a resume: do not leave it behind.
		if err != nil {
			if st, serr := os.Stat(partial); serr == nil && st.Size() == 0 {
				os.Remove(partial)
			}
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("hub: %s: %w", name, err)
	}
	have := st.Size()
	if size >= 0 && have > size {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("hub: %s: %w", name, err)
		}
		have = 0
	}
	hs := newHashes(want, size)
	if have > 0 {
		// Hash the part already on disk so the whole blob is verified.
		if _, err := io.Copy(hs, io.NewSectionReader(f, 0, have)); err != nil {
			return fmt.Errorf("hub: %s: reading partial %s: %w", name, partial, err)
		}
	}
	p.FileStart(name, size, have)
	restarts := 0
	var lastErr error
	// restart discards what was received: at most maxRestarts times per file, since a
	// server that answers every resume from byte 0 and cuts off early never finishes.
	restart := func(why string) error {
		p.FileAdvance(name, -have)
		have = 0
		hs.reset()
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("hub: %s: %w", name, err)
		}
		if restarts++; restarts > maxRestarts {
			msg := fmt.Sprintf("hub: %s: %s; that is %d restarts from byte 0, giving up", name, why, restarts)
			if lastErr != nil {
				msg += fmt.Sprintf(" (before that, %v)", lastErr)
			}
			return errors.New(msg)
		}
		return nil
	}
	idle := c.IdleTimeout
	if idle <= 0 {
		idle = c.waitFor(withKind(ctx, kindDownload)).d
	}
	// Every file has a deadline that grows with its size, so no pattern of answers
	// (a byte per connection, endless resumes) can hold a fetch forever.
	limit := c.fileDeadline(size)
	dctx, dcancel := context.WithTimeoutCause(ctx, limit, errFileDeadline)
	defer dcancel()
	stopped := func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if dctx.Err() != nil {
			return fmt.Errorf("hub: %s: not complete after %s, the most allowed for %s; %d bytes received; "+
				"the partial is kept at %s and resumes next time", name, limit, sizeText(size), have, partial)
		}
		return nil
	}
	// Bytes that can be written: never past the stated size, and a bound when none is stated.
	maxBytes := func() int64 {
		if size >= 0 {
			return size - have
		}
		return maxUnstatedSize - have
	}
	failures := 0
	for size < 0 || have < size {
		if failures > c.MaxRetries {
			return fmt.Errorf("hub: %s: download failed after %d attempts (partial kept at %s): %w", name, failures, partial, lastErr)
		}
		if failures > 0 {
			t := time.NewTimer(c.Backoff(failures))
			select {
			case <-dctx.Done():
				t.Stop()
				return stopped()
			case <-t.C:
			}
		}
		req, err := http.NewRequest(http.MethodGet, loc, nil)
		if err != nil {
			return fmt.Errorf("hub: %s: %w", name, err)
		}
		from := have
		if have > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		}
		// Bytes on disk are the identity encoding: a compressed transfer would make
		// offsets and sizes disagree with the Range and the announced size.
		req.Header.Set("Accept-Encoding", "identity")
		rctx, rcancel := context.WithCancel(withKind(dctx, kindDownload))
		resp, err := c.Do(rctx, req)
		if err != nil {
			rcancel()
			if err := stopped(); err != nil {
				return err
			}
			// Do already retried connection errors, 5xx and 429.
			return fmt.Errorf("hub: %s: download: %w", name, err)
		}
		switch resp.StatusCode {
		case http.StatusPartialContent:
			start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
			if !ok || start != have || (size >= 0 && total >= 0 && total != size) {
				resp.Body.Close()
				rcancel()
				if err := restart(fmt.Sprintf("the server answered Content-Range %q to a request from byte %d of %d",
					resp.Header.Get("Content-Range"), from, size)); err != nil {
					return err
				}
				failures++
				lastErr = fmt.Errorf("server answered range %q to a request from byte %d", resp.Header.Get("Content-Range"), from)
				continue
			}
			if size < 0 && total >= 0 {
				size = total
			}
		case http.StatusOK:
			if have > 0 { // the server ignored Range: start over (http_get does the same)
				if err := restart(fmt.Sprintf("the server ignored Range (it answered 200 from byte 0 to a request from byte %d)", from)); err != nil {
					resp.Body.Close()
					rcancel()
					return err
				}
			}
			if size < 0 && resp.ContentLength >= 0 && resp.Header.Get("Content-Encoding") == "" {
				size = resp.ContentLength
			}
		case http.StatusRequestedRangeNotSatisfiable:
			resp.Body.Close()
			rcancel()
			if err := restart(fmt.Sprintf("the server answered 416 to a request from byte %d of %d", from, size)); err != nil {
				return err
			}
			failures++
			lastErr = errors.New("HTTP 416")
			continue
		default:
			var err error
			if c.isHubHost(resp.Request.URL) {
				err = c.httpError(resp, name, "", "")
			} else {
				// A CDN or storage host: its 403 means an expired or bad signed URL, not
				// a missing token (the token is never sent there).
				err = &StatusError{Method: "GET", URL: redactURL(resp.Request.URL), Status: resp.StatusCode}
				if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusGone {
					err = fmt.Errorf("%w: %w", errLocationRefused, err)
				}
			}
			resp.Body.Close()
			rcancel()
			return fmt.Errorf("hub: %s: download: %w", name, err)
		}
		n, cerr := copyWithIdle(f, have, resp.Body, maxBytes(), hs, idle, rcancel, func(k int) { p.FileAdvance(name, int64(k)) })
		resp.Body.Close()
		rcancel()
		have += n
		if errors.Is(cerr, errTooLong) {
			// More than stated: the content is not what the Hub described; none of it is kept.
			p.FileAdvance(name, -have)
			if err := f.Truncate(0); err != nil {
				return fmt.Errorf("hub: %s: %w", name, err)
			}
			if size < 0 {
				return fmt.Errorf("hub: %s: the server sent more than %s for a file whose size nobody stated: %w", name, sizeText(maxUnstatedSize), ErrChecksum)
			}
			return fmt.Errorf("hub: %s: the server sent more than the announced %d bytes: %w", name, size, ErrChecksum)
		}
		if cerr == nil && size < 0 {
			size = have
		}
		if cerr == nil && have == size {
			break
		}
		if err := stopped(); err != nil {
			return err
		}
		if cerr == nil || errors.Is(cerr, io.ErrUnexpectedEOF) {
			cerr = fmt.Errorf("the answer ended after byte %d of %d: %w", have, size, io.ErrUnexpectedEOF)
		}
		lastErr = cerr
		if have > from {
			failures = 0 // progress was made: the retry budget is per stall, like http_get's
		}
		failures++
	}
	if want.sha256 != "" || want.gitSHA1 != "" {
		got, wantHex, algo := hs.sum(want)
		if got != wantHex {
			f.Close()
			os.Remove(partial)
			p.FileAdvance(name, -have)
			return fmt.Errorf("hub: %s: %s of the download is %s, want %s; it was discarded: %w", name, algo, got, wantHex, ErrChecksum)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("hub: %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("hub: %s: %w", name, err)
	}
	if err := os.Rename(partial, blob); err != nil {
		return fmt.Errorf("hub: %s: %w", name, err)
	}
	return nil
}

// copyWithIdle copies body to f at off, at most limit bytes (errTooLong when the body
// holds more; the excess is never written); if no byte arrives for idle, it cancels the
// request (cancel) and returns the error of the aborted read.
func copyWithIdle(f *os.File, off int64, body io.Reader, limit int64, hs *hashes, idle time.Duration, cancel func(), progress func(int)) (int64, error) {
	timer := time.AfterFunc(idle, cancel)
	defer timer.Stop()
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := body.Read(buf)
		if k > 0 {
			timer.Reset(idle)
			if int64(k) > limit-n {
				return n, errTooLong
			}
			if _, werr := f.WriteAt(buf[:k], off+n); werr != nil {
				return n, werr
			}
			hs.Write(buf[:k])
			n += int64(k)
			progress(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// parseContentRange parses "bytes a-b/total" (total may be "*", returned as -1).
func parseContentRange(h string) (start, total int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(spec, "/")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	end, err := strconv.ParseInt(b, 10, 64)
	if err != nil || end < start {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil || total <= end {
			return 0, 0, false
		}
	}
	return start, total, true
}

// hashes computes the digests a blob is verified with while it is written.
type hashes struct {
	s256 hash.Hash
	s1   hash.Hash
	size int64
}

func newHashes(want digest, size int64) *hashes {
	h := &hashes{size: size}
	if want.sha256 != "" {
		h.s256 = sha256.New()
	}
	if want.gitSHA1 != "" && size >= 0 {
		h.s1 = sha1.New()
	}
	h.reset()
	return h
}

func (h *hashes) reset() {
	if h.s256 != nil {
		h.s256.Reset()
	}
	if h.s1 != nil {
		h.s1.Reset()
		fmt.Fprintf(h.s1, "blob %d\x00", h.size)
	}
}

func (h *hashes) Write(b []byte) (int, error) {
	if h.s256 != nil {
		h.s256.Write(b)
	}
	if h.s1 != nil {
		h.s1.Write(b)
	}
	return len(b), nil
}

func (h *hashes) sum(want digest) (got, wantHex, algo string) {
	if want.sha256 != "" {
		return hex.EncodeToString(h.s256.Sum(nil)), want.sha256, "sha256"
	}
	if h.s1 == nil {
		return want.gitSHA1, want.gitSHA1, "git sha1"
	}
	return hex.EncodeToString(h.s1.Sum(nil)), want.gitSHA1, "git sha1"
}

// linkPointer makes pointer a relative symlink to blob, atomically (a temporary link
// renamed over), so a concurrent fetch never sees a missing or half-made pointer.
func linkPointer(blob, pointer string) error {
	dir := filepath.Dir(pointer)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	rel, err := filepath.Rel(dir, blob)
	if err != nil {
		rel = blob
	}
	if cur, err := os.Readlink(pointer); err == nil && cur == rel {
		return nil
	}
	tmp := fmt.Sprintf("%s.%d.%d.tmp", pointer, os.Getpid(), time.Now().UnixNano())
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("hub: snapshot link %s: %w", pointer, err)
	}
	if err := os.Rename(tmp, pointer); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hub: snapshot link %s: %w", pointer, err)
	}
	return nil
}

// checkRevision rejects revisions that would escape refs/ when used as a file name.
func checkRevision(rev string) error {
	if rev == "" || strings.HasPrefix(rev, "/") || strings.ContainsAny(rev, "\\\x00") {
		return fmt.Errorf("%w: bad revision %q", ErrBadRef, rev)
	}
	for _, s := range strings.Split(rev, "/") {
		if s == "" || s == "." || s == ".." {
			return fmt.Errorf("%w: bad revision %q", ErrBadRef, rev)
		}
	}
	return nil
}

// writeRef records refs/<revision> = commit atomically, without a newline, and only
// when it changes (file_download.py: _cache_commit_hash_for_specific_revision).
func writeRef(root, revision, commit string) error {
	if revision == commit {
		return nil
	}
	p := filepath.Join(root, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*.tmp")
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	_, werr := tmp.WriteString(commit)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("hub: writing %s: %w", p, errors.Join(werr, cerr))
	}
	os.Chmod(tmp.Name(), 0o644)
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// offlineSnapshot answers from the cache: the snapshot of the revision must exist and
// hold the selected files. When huggingface_hub cached the commit's tree listing
// (trees/<commit>.json, _tree_cache.py), every selected file of it must be present;
// otherwise at least one present file must be selected and none may dangle.
func offlineSnapshot(cache Cache, repoType string, ref Ref, opts FetchOptions, cause error) (string, string, error) {
	why := "the Hub cannot be reached: " + cause.Error()
	if errors.Is(cause, ErrOffline) {
		why = "offline mode (HF_HUB_OFFLINE is set)"
	}
	dir, commit, err := cache.LocalSnapshot(repoType, ref.Repo, ref.Revision)
	var ue *UnreachableError
	if err != nil && errors.As(cause, &ue) && errors.Is(err, ErrNotCached) {
		// No network and nothing cached: one short line says both.
		return "", "", &notCached{fmt.Sprintf("hub: %s cannot be reached (%s) and the model is not cached; "+
			"HF_HUB_OFFLINE=1 uses the cache", ue.Host, ue.Why), ue}
	}
	if err != nil {
		return "", "", fmt.Errorf("%w; %s; fetch it once with network access (xpuinject fetch %s)", err, why, ref)
	}
	present := map[string]bool{}
	var dangling []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if isRegular(p) {
			present[rel] = true
		} else {
			dangling = append(dangling, rel)
		}
		return nil
	})
	var expected []string
	root := filepath.Join(cache.Dir, RepoFolder(repoType, ref.Repo))
	if b, err := os.ReadFile(filepath.Join(root, "trees", commit+".json")); err == nil {
		var tree struct {
			FormatVersion int                        `json:"format_version"`
			Files         map[string]json.RawMessage `json:"files"`
		}
		if json.Unmarshal(b, &tree) == nil && tree.FormatVersion == 1 {
			for p := range tree.Files {
				expected = append(expected, p)
			}
			sort.Strings(expected)
		}
	}
	if len(opts.Include) == 0 && repoType != "model" {
		opts.Include = []string{"*"}
	}
	var missing []string
	if expected != nil {
		sel := selectFiles(expected, opts.Include, opts.Exclude)
		if len(sel) == 0 {
			return "", "", fmt.Errorf("%w: %s: no file of the cached listing of %s matches %s; %s",
				ErrNotCached, ref, commit, describeSelection(opts), why)
		}
		for _, p := range sel {
			if !present[p] {
				missing = append(missing, p)
			}
		}
	} else {
		for _, p := range selectFiles(dangling, opts.Include, opts.Exclude) {
			missing = append(missing, p)
		}
		var names []string
		for p := range present {
			names = append(names, p)
		}
		if len(missing) == 0 && len(selectFiles(names, opts.Include, opts.Exclude)) == 0 {
			return "", "", fmt.Errorf("%w: %s: the cached snapshot %s holds no file matching %s; %s",
				ErrNotCached, ref, dir, describeSelection(opts), why)
		}
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("%w: %s: the cached snapshot %s is missing %s; %s",
			ErrNotCached, ref, dir, listSample(missing), why)
	}
	return dir, commit, nil
}

// notCached is ErrNotCached with a message of its own, and the error behind it.
type notCached struct {
	msg   string
	cause error
}

func (e *notCached) Error() string   { return e.msg }
func (e *notCached) Unwrap() []error { return []error{ErrNotCached, e.cause} }

func describeSelection(o FetchOptions) string {
	s := "(default: config, tokenizer, safetensors)"
	if len(o.Include) > 0 {
		s = "--include " + strings.Join(o.Include, ",")
	}
	if len(o.Exclude) > 0 {
		s += " --exclude " + strings.Join(o.Exclude, ",")
	}
	return s
}

func listSample(paths []string) string {
	if len(paths) == 0 {
		return "no files"
	}
	if len(paths) <= 5 {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s, … (%d files)", strings.Join(paths[:5], ", "), len(paths))
}

// cacheDirTag is huggingface_hub's CACHEDIR.TAG (_local_folder.py: CACHEDIR_TAG_CONTENT,
// the Cache Directory Tagging Standard), so backup tools skip the cache.
const cacheDirTag = "Signature: 8a477f597d28d172789f06886806bc55\n" +
	"# This file is a cache directory tag created by huggingface_hub.\n" +
	"# For information about cache directory tags, see:\n" +
	"#\thttps://bford.info/cachedir/\n"

func writeCacheDirTag(dir string) {
	p := filepath.Join(dir, "CACHEDIR.TAG")
	if _, err := os.Lstat(p); err == nil {
		return
	}
	os.WriteFile(p, []byte(cacheDirTag), 0o644) // best effort, as in Python
}
