package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/plan"
)

// fetchSnapshot downloads ref into the HF cache and returns the snapshot folder and
// commit. nil: resolveModel only reads what is cached already (wire the hub download
// here, e.g. in an init of fetch.go).
var fetchSnapshot func(ctx context.Context, f *Factory, ref hub.Ref) (dir, commit string, err error)

// errModelArg marks a MODEL argument that is none of the accepted forms.
var errModelArg = errors.New("not a model")

// resolveModel turns the MODEL argument into a checkpoint folder and its Source:
//   - a local folder with config.json: itself (Source.Path, absolute);
//   - a preset name ("llama", "llama@<rev>"): its Hub repository, as below;
//   - org/name[@revision]: the snapshot in the HF cache ($HF_HUB_CACHE, else
//     $HF_HOME/hub, else ~/.cache/huggingface/hub), downloaded by fetchSnapshot when
//     that is set and the snapshot is not cached.
func resolveModel(ctx context.Context, f *Factory, arg string) (dir string, src plan.Source, err error) {
	if arg == "" {
		return "", src, &usageError{fmt.Errorf("%w: empty MODEL", errModelArg)}
	}
	if st, statErr := os.Stat(arg); statErr == nil {
		if !st.IsDir() {
			return "", src, &usageError{fmt.Errorf("model %s: a file, not a folder; give the folder that holds config.json", arg)}
		}
		abs, err := filepath.Abs(arg)
		if err != nil {
			return "", src, fmt.Errorf("model %s: %w", arg, err)
		}
		if _, err := os.Stat(filepath.Join(abs, "config.json")); err != nil {
			return "", src, &usageError{fmt.Errorf("model %s: folder has no config.json\n"+
				"give a Hugging Face model folder (config.json + safetensors), e.g. testdata/fixtures/llama-odd", abs)}
		}
		return abs, plan.Source{Path: abs}, nil
	}
	var ref hub.Ref
	name, rev, hasRev := strings.Cut(arg, "@")
	if p, ok := lookupPreset(name); ok {
		ref = p.Ref()
		if hasRev {
			if rev == "" {
				return "", src, &usageError{fmt.Errorf("%w: %q: empty revision after @", errModelArg, arg)}
			}
			ref.Revision = rev
		}
	} else {
		r, err := hub.ParseRef(arg)
		if err != nil || (hasRev && rev == "") {
			if looksLikePath(arg) {
				// Bad usage like any other MODEL that is none of the accepted forms.
				return "", src, &usageError{fmt.Errorf("model %s: no such folder\n"+
					"give a folder with config.json and safetensors, a preset or org/name[@revision]\n(%s)",
					arg, presetNames())}
			}
			hint := ""
			if p := nearestPreset(name); p != "" {
				hint = fmt.Sprintf("; did you mean %s?", p)
			}
			// a shipped fixture named from the clone's root ("llama-odd")
			if fx := filepath.Join("testdata", "fixtures", arg); isDir(fx) {
				hint = fmt.Sprintf("; did you mean %s?", fx)
			}
			return "", src, &usageError{fmt.Errorf("%w: %q: no local folder, no preset and not org/name[@revision]%s\n"+
				"(%s)", errModelArg, arg, hint, presetNames())}
		}
		ref = r
	}
	cache := hub.CacheFromEnv(f.Getenv)
	dir, commit, err := cache.LocalSnapshot("model", ref.Repo, ref.Revision)
	fetched := false
	if errors.Is(err, hub.ErrNotCached) && fetchSnapshot != nil {
		dir, commit, err = fetchSnapshot(ctx, f, ref)
		fetched = true
	}
	if err != nil {
		if errors.Is(err, hub.ErrNotCached) && !fetched {
			return "", src, fmt.Errorf("model %s is not in the local Hugging Face cache (%s); 'xpuinject fetch %s' downloads it: %w",
				ref, cache.Dir, ref, err)
		}
		return "", src, fmt.Errorf("model %s: %w", ref, err)
	}
	return dir, plan.Source{Repo: ref.Repo, Revision: commit}, nil
}

// looksLikePath: an argument that can only have meant a folder.
func looksLikePath(s string) bool {
	return strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") ||
		strings.Contains(s, string(os.PathSeparator)+".") || strings.Count(s, "/") > 1 || strings.Contains(s, `\`)
}
