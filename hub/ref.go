// Package hub is a small Hugging Face Hub client: model references, the local HF cache
// (shared both ways with Python's huggingface_hub), downloads and publishing.
package hub

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Ref names a repository on the Hub and a revision (branch, tag or commit).
type Ref struct {
	Repo     string // "org/name"
	Revision string // "main" when not given
}

func (r Ref) String() string {
	if r.Revision == "" || r.Revision == "main" {
		return r.Repo
	}
	return r.Repo + "@" + r.Revision
}

// repoIDPattern follows huggingface_hub's validate_repo_id (utils/_validators.py):
// "name" or "namespace/name", letters, digits, '-', '_', '.'; no "--" or "..";
// no leading/trailing '-' or '.'; at most 96 characters.
var repoIDPattern = regexp.MustCompile(`^(?:[\w\-.]+/)?[\w\-.]+$`)

// ErrBadRef is returned for strings that are not "org/name[@revision]".
var ErrBadRef = errors.New("hub: not a repository reference")

// ParseRef parses "org/name" or "org/name@revision".
func ParseRef(s string) (Ref, error) {
	repo, rev, _ := strings.Cut(s, "@")
	if rev == "" {
		rev = "main"
	}
	if !strings.Contains(repo, "/") || len(repo) > 96 || !repoIDPattern.MatchString(repo) ||
		strings.Contains(repo, "--") || strings.Contains(repo, "..") ||
		strings.HasPrefix(repo, "-") || strings.HasPrefix(repo, ".") ||
		strings.HasSuffix(repo, "-") || strings.HasSuffix(repo, ".") {
		return Ref{}, fmt.Errorf("%w: %q (want org/name or org/name@revision)", ErrBadRef, s)
	}
	return Ref{Repo: repo, Revision: rev}, nil
}
