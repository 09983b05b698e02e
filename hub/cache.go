package hub

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Cache is a Hugging Face hub cache folder laid out as huggingface_hub lays it out
// (huggingface_hub/file_download.py, constants.py):
//
//	<dir>/<type>s--<org>--<name>/blobs/<etag>
//	                         /refs/<revision>        (holds the commit sha)
//	                         /snapshots/<sha>/<path> (relative symlinks into blobs/)
type Cache struct {
	Dir string
}

// DefaultCache returns the cache folder huggingface_hub would use:
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
// (XDG_CACHE_HOME honoured as huggingface_hub's constants.py does).
func DefaultCache() Cache { return CacheFromEnv(os.Getenv) }

// CacheFromEnv is DefaultCache with the environment read through getenv.
// As constants.py, the legacy HUGGINGFACE_HUB_CACHE is read when HF_HUB_CACHE is unset,
// and "~" and $VARS are expanded.
func CacheFromEnv(getenv func(string) string) Cache {
	if d := cmp.Or(getenv("HF_HUB_CACHE"), getenv("HUGGINGFACE_HUB_CACHE")); d != "" {
		return Cache{Dir: expandPath(d, getenv)}
	}
	return Cache{Dir: filepath.Join(hfHome(getenv), "hub")}
}

// HFHome is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func HFHome() string { return hfHome(os.Getenv) }

func hfHome(getenv func(string) string) string {
	if d := getenv("HF_HOME"); d != "" {
		return expandPath(d, getenv)
	}
	if x := getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandPath(x, getenv), "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// RepoFolder is the cache folder name of a repository: "models--org--name".
func RepoFolder(repoType, repo string) string {
	return repoType + "s--" + strings.ReplaceAll(repo, "/", "--")
}

// ErrNotCached is returned when the cache holds no snapshot for a revision.
var ErrNotCached = errors.New("hub: not in the local cache")

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// LocalSnapshot finds the snapshot folder of repo at revision without any network:
// a 40-hex revision is a commit; anything else is looked up in refs/.
func (c Cache) LocalSnapshot(repoType, repo, revision string) (dir, commit string, err error) {
	root := filepath.Join(c.Dir, RepoFolder(repoType, repo))
	commit = revision
	if !commitPattern.MatchString(revision) {
		b, err := os.ReadFile(filepath.Join(root, "refs", filepath.FromSlash(revision)))
		if err != nil {
			return "", "", fmt.Errorf("%w: %s@%s (no %s)", ErrNotCached, repo, revision,
				filepath.Join(root, "refs", revision))
		}
		commit = strings.TrimSpace(string(b))
		if !commitPattern.MatchString(commit) {
			return "", "", fmt.Errorf("hub: %s: not a commit sha: %q", filepath.Join(root, "refs", revision), commit)
		}
	}
	dir = filepath.Join(root, "snapshots", commit)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("%w: %s@%s (no snapshot folder %s)", ErrNotCached, repo, revision, dir)
	}
	return dir, commit, nil
}

// expandPath expands a leading "~/" and then $VAR / ${VAR}, as constants.py does with
// os.path.expandvars(os.path.expanduser(...)) for HF_HOME, HF_HUB_CACHE, HF_TOKEN_PATH.
// Unset variables stay as written, as in expandvars.
func expandPath(p string, getenv func(string) string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, p[1:])
		}
	}
	if !strings.Contains(p, "$") {
		return p
	}
	return os.Expand(p, func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return "${" + k + "}"
	})
}
