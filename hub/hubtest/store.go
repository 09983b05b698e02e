// Package hubtest is a test Hub server: it speaks the Hub's resolve / revision-info
// (download) and repo-create / branch / preupload / commit / LFS (publish) protocols
// over an in-memory store, and injects faults on demand. It is used by Go tests
// (httptest) and, via cmd/hubtestserver, by Python tests through HF_ENDPOINT.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
)

// File is one file of a commit.
type File struct {
	Data []byte
	// LFS marks files stored through Git LFS (the resolve endpoint then redirects to
	// a "CDN" path and reports the sha256 as X-Linked-Etag).
	LFS bool
}

// SHA256 is the hex sha256 of the file's content (the LFS oid).
func (f File) SHA256() string { s := sha256.Sum256(f.Data); return hex.EncodeToString(s[:]) }

// GitSHA1 is the git blob id of the content (the ETag of a regular file).
func (f File) GitSHA1() string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(f.Data))
	h.Write(f.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// Commit is an immutable snapshot of a repository.
type Commit struct {
	SHA     string
	Parent  string
	Summary string
	Files   map[string]File
}

// Repo is one repository of the store.
type Repo struct {
	Type     string // "model", "kernel", "dataset"
	ID       string // "org/name"
	Private  bool
	Gated    bool
	Branches map[string]string  // branch -> commit sha
	Commits  map[string]*Commit // sha -> commit
}

// Store holds repositories; safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	repos map[string]*Repo // key: type + "/" + id
	seq   int
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{repos: map[string]*Repo{}} }

func key(repoType, id string) string { return repoType + "/" + id }

// CreateRepo creates an empty repository with a "main" branch; ok is false if it existed.
func (s *Store) CreateRepo(repoType, id string, private bool) (r *Repo, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, exists := s.repos[key(repoType, id)]; exists {
		return r, false
	}
	r = &Repo{Type: repoType, ID: id, Private: private, Branches: map[string]string{}, Commits: map[string]*Commit{}}
	c := s.newCommitLocked(r, "", "initial commit", map[string]File{})
	r.Branches["main"] = c.SHA
	s.repos[key(repoType, id)] = r
	return r, true
}

// newCommitLocked makes a commit whose sha is derived from its content and a counter.
func (s *Store) newCommitLocked(r *Repo, parent, summary string, files map[string]File) *Commit {
	s.seq++
	h := sha1.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00", r.Type, r.ID, s.seq, parent)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%s\x00", n, files[n].GitSHA1())
	}
	c := &Commit{SHA: hex.EncodeToString(h.Sum(nil)), Parent: parent, Summary: summary, Files: files}
	r.Commits[c.SHA] = c
	return c
}

// Put commits files (replacing the whole tree) on a branch of a repository,
// creating the repository and branch as needed; it returns the new commit sha.
func (s *Store) Put(repoType, id, branch string, files map[string]File) string {
	s.CreateRepo(repoType, id, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[key(repoType, id)]
	c := s.newCommitLocked(r, r.Branches[branch], "put", files)
	r.Branches[branch] = c.SHA
	return c.SHA
}

// Apply commits a change on top of a branch: files to add or replace and paths to
// delete. It returns the new commit sha.
func (s *Store) Apply(repoType, id, branch, summary string, add map[string]File, del []string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.repos[key(repoType, id)]
	if !ok {
		return "", fmt.Errorf("hubtest: repository %s not found", key(repoType, id))
	}
	head, ok := r.Branches[branch]
	if !ok {
		return "", fmt.Errorf("hubtest: %s: branch %q not found", key(repoType, id), branch)
	}
	files := map[string]File{}
	for p, f := range r.Commits[head].Files {
		files[p] = f
	}
	for _, p := range del {
		delete(files, p)
	}
	for p, f := range add {
		files[p] = f
	}
	c := s.newCommitLocked(r, head, summary, files)
	r.Branches[branch] = c.SHA
	return c.SHA, nil
}

// CreateBranch creates branch from the head of from ("main" when empty).
func (s *Store) CreateBranch(repoType, id, branch, from string) (created bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.repos[key(repoType, id)]
	if !ok {
		return false, fmt.Errorf("hubtest: repository %s not found", key(repoType, id))
	}
	if _, exists := r.Branches[branch]; exists {
		return false, nil
	}
	if from == "" {
		from = "main"
	}
	r.Branches[branch] = r.Branches[from]
	return true, nil
}

// Resolve returns the repository and the commit a revision (branch or sha) names.
func (s *Store) Resolve(repoType, id, revision string) (*Repo, *Commit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.repos[key(repoType, id)]
	if !ok {
		return nil, nil, fmt.Errorf("hubtest: repository %s not found", key(repoType, id))
	}
	if sha, ok := r.Branches[revision]; ok {
		return r, r.Commits[sha], nil
	}
	if c, ok := r.Commits[revision]; ok {
		return r, c, nil
	}
	return r, nil, fmt.Errorf("hubtest: %s: revision %q not found", key(repoType, id), revision)
}

// Repo returns a repository, or nil.
func (s *Store) Repo(repoType, id string) *Repo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repos[key(repoType, id)]
}
