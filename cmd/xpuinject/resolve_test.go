package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub"
	"github.com/xpuinject/xpuinject/inject/plan"
)

func withFetchSnapshot(t *testing.T, fn func(context.Context, *Factory, hub.Ref) (string, string, error)) {
	t.Helper()
	old := fetchSnapshot
	fetchSnapshot = fn
	t.Cleanup(func() { fetchSnapshot = old })
}

func TestResolveModel(t *testing.T) {
	cache := t.TempDir()
	f := &Factory{Getenv: func(k string) string {
		if k == "HF_HUB_CACHE" {
			return cache
		}
		return ""
	}}
	ctx := context.Background()

	// Local folder.
	dir, src, err := resolveModel(ctx, f, filepath.Join(fixtures, "levit-tiny"))
	abs, _ := filepath.Abs(filepath.Join(fixtures, "levit-tiny"))
	if err != nil || dir != abs || src != (plan.Source{Path: abs}) {
		t.Fatalf("local: %q %+v %v", dir, src, err)
	}

	// Not cached, no download hook: the error says so and names the fix.
	withFetchSnapshot(t, nil)
	_, _, err = resolveModel(ctx, f, "qwen2")
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(),
		"model Qwen/Qwen2.5-0.5B is not in the local Hugging Face cache ("+cache+"); 'xpuinject fetch Qwen/Qwen2.5-0.5B' downloads it") {
		t.Fatalf("not cached: %v", err)
	}

	// Not cached, hook set: it is called with the preset's ref (revision from @).
	var called hub.Ref
	withFetchSnapshot(t, func(_ context.Context, _ *Factory, ref hub.Ref) (string, string, error) {
		called = ref
		return "/snap", "c0ffee", nil
	})
	dir, src, err = resolveModel(ctx, f, "levit@v2")
	if err != nil || dir != "/snap" || src != (plan.Source{Repo: "facebook/levit-128S", Revision: "c0ffee"}) ||
		called != (hub.Ref{Repo: "facebook/levit-128S", Revision: "v2"}) {
		t.Fatalf("hook: %q %+v %v called %+v", dir, src, err, called)
	}
	withFetchSnapshot(t, func(context.Context, *Factory, hub.Ref) (string, string, error) {
		return "", "", errors.New("hub: 401 Unauthorized")
	})
	if _, _, err := resolveModel(ctx, f, "meta-llama/Llama-3.2-1B"); err == nil ||
		err.Error() != "model meta-llama/Llama-3.2-1B: hub: 401 Unauthorized" {
		t.Fatalf("hook error: %v", err)
	}

	withFetchSnapshot(t, func(context.Context, *Factory, hub.Ref) (string, string, error) {
		return "", "", fmt.Errorf("%w: offline", hub.ErrNotCached)
	})
	if _, _, err := resolveModel(ctx, f, "org/x"); !errors.Is(err, hub.ErrNotCached) ||
		err.Error() != "model org/x: hub: not in the local cache: offline" {
		t.Fatalf("hook not-cached error: %v", err)
	}

	// Cached org/name: refs/main -> snapshot.
	sha := strings.Repeat("ab", 20)
	snap := filepath.Join(cache, "models--org--m", "snapshots", sha)
	os.MkdirAll(snap, 0o755)
	os.MkdirAll(filepath.Join(cache, "models--org--m", "refs"), 0o755)
	os.WriteFile(filepath.Join(cache, "models--org--m", "refs", "main"), []byte(sha+"\n"), 0o644)
	dir, src, err = resolveModel(ctx, f, "org/m")
	if err != nil || dir != snap || src != (plan.Source{Repo: "org/m", Revision: sha}) {
		t.Fatalf("cached: %q %+v %v", dir, src, err)
	}

	// Neither folder, preset nor reference.
	for _, arg := range []string{"", "gpt9", "a/b/c/d", "org/m@"} {
		if _, _, err := resolveModel(ctx, f, arg); err == nil || !isUsageError(err) {
			t.Errorf("%q: %v", arg, err)
		}
	}
}

func TestPresets(t *testing.T) {
	ps, err := Presets()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"llama": "meta-llama/Llama-3.2-1B", "llama8b": "meta-llama/Llama-3.1-8B", "qwen2": "Qwen/Qwen2.5-0.5B",
		"qwen3": "Qwen/Qwen3-0.6B", "mistral": "mistralai/Mistral-7B-v0.1", "levit": "facebook/levit-128S",
		"gemma2": "google/gemma-2-2b", "gemma3": "google/gemma-3-1b-it", "phi3": "microsoft/Phi-3-mini-4k-instruct",
		"phi4mini": "microsoft/Phi-4-mini-instruct", "smollm3": "HuggingFaceTB/SmolLM3-3B",
		"qwen3moe": "Qwen/Qwen3-30B-A3B", "mixtral": "mistralai/Mixtral-8x7B-v0.1", "olmoe": "allenai/OLMoE-1B-7B-0924",
	}
	if len(ps) != len(want) {
		t.Fatalf("%d presets, want %d", len(ps), len(want))
	}
	for _, p := range ps {
		if want[p.Name] != p.Repo || p.Description == "" {
			t.Errorf("preset %+v", p)
		}
		if p.Ref().Revision != "main" {
			t.Errorf("%s: revision %q", p.Name, p.Ref().Revision)
		}
	}
	for _, fx := range []string{"llama-tiny", "levit-tiny"} {
		if _, ok := lookupPreset(fx); ok {
			t.Errorf("fixture %s is a preset", fx)
		}
	}
}

func TestParsePresetsRejects(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"a: {repo: nope}", `presets: a: hub: not a repository reference: "nope"`},
		{"a/b: {repo: o/n}", `bad preset name "a/b"`},
		{"a: {repo: o/n, extra: 1}", "field extra not found"},
		{"a: {repo: o/n@v1}", "put the revision under revision:"},
		{"- x", "presets: yaml: unmarshal errors"},
	} {
		if _, err := parsePresets([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	ps, err := parsePresets([]byte("b: {repo: o/b, revision: v1, description: d}\na: {repo: o/a}"))
	if err != nil || len(ps) != 2 || ps[0].Name != "a" || ps[1].Ref() != (hub.Ref{Repo: "o/b", Revision: "v1"}) {
		t.Fatalf("%+v %v", ps, err)
	}
}

func TestNearMissesSuggest(t *testing.T) {
	for name, want := range map[string]string{"lama": "llama", "Llama": "llama", "mistrall": "mistral", "gpt": ""} {
		if got := nearestPreset(name); got != want {
			t.Errorf("nearestPreset(%q) = %q, want %q", name, got, want)
		}
	}
	code, _, stderr := runCLI(t, nil, "lama")
	if code != exitUsage || !strings.Contains(stderr, "did you mean llama?") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, nil, "packge", "x", "--out", "y")
	if code != exitUsage || !strings.Contains(stderr, "Did you mean this?\n\tpack\n\tpackage\n") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// A fixture's bare name, typed from the clone's root, is pointed at its folder.
func TestResolveSuggestsAFixture(t *testing.T) {
	wd, _ := os.Getwd()
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	code, _, errOut := runCLI(t, nil, "plan", "llama-odd")
	if code != exitUsage || !strings.Contains(errOut, "did you mean testdata/fixtures/llama-odd?") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}
