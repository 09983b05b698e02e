package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/xpuinject/xpuinject/hub/hubtest"
)

// fetchTestExec runs a command tree and maps its error to an exit code as Main does.
func fetchTestExec(root *cobra.Command, args []string) int {
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	switch {
	case err == nil:
		return exitOK
	case isUsageError(err):
		return exitUsage
	}
	return exitError1
}

func TestFetchFlags(t *testing.T) {
	cases := []struct {
		args []string
		want fetchOptions
		code int
	}{
		{[]string{"fetch", "org/m"}, fetchOptions{Model: "org/m", Workers: 8, RepoType: "model"}, 0},
		{[]string{"fetch", "org/m@v1", "--include", "*.json,*.safetensors", "--exclude", "x*", "-q", "--workers", "3"},
			fetchOptions{Model: "org/m@v1", Include: []string{"*.json", "*.safetensors"}, Exclude: []string{"x*"}, Quiet: true, Workers: 3, RepoType: "model"}, 0},
		{[]string{"fetch"}, fetchOptions{}, exitUsage},
		{[]string{"fetch", "a/b", "--workers", "-1"}, fetchOptions{}, exitUsage},
		{[]string{"fetch", "a/b", "--nope"}, fetchOptions{}, exitUsage},
	}
	for _, tc := range cases {
		var got *fetchOptions
		f := &Factory{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
		root := NewRootCmd(f)
		for _, c := range root.Commands() {
			if c.Name() == "fetch" {
				root.RemoveCommand(c)
			}
		}
		root.AddCommand(newFetchCmdWith(f, func(_ context.Context, o *fetchOptions) error { got = o; return nil }))
		code := fetchTestExec(root, tc.args)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, f.ErrOut)
			continue
		}
		if tc.code == 0 && !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%v: options %+v, want %+v", tc.args, *got, tc.want)
		}
	}
}

func TestParseModelRefPreset(t *testing.T) {
	p, ok := lookupPreset("llama")
	if !ok {
		t.Fatal("no llama preset")
	}
	ref, err := parseModelRef("llama", "")
	if err != nil || ref != p.Ref() {
		t.Errorf("llama: %v %v, want %v", ref, err, p.Ref())
	}
	ref, err = parseModelRef("llama@abc", "")
	if err != nil || ref.Repo != p.Repo || ref.Revision != "abc" {
		t.Errorf("llama@abc: %v %v", ref, err)
	}
}

func TestParseModelRef(t *testing.T) {
	for _, c := range []struct {
		model, rev, want string
		bad              bool
	}{
		{"org/m", "", "org/m", false},
		{"org/m@v2", "", "org/m@v2", false},
		{"org/m", "dev", "org/m@dev", false},
		{"org/m@v2", "v2", "org/m@v2", false},
		{"org/m@v2", "v3", "", true},
		{"no-such-preset", "", "", true},
		{"org/m--x", "", "", true},
		{"org/m@", "", "", true},
	} {
		ref, err := parseModelRef(c.model, c.rev)
		if (err != nil) != c.bad || (!c.bad && ref.String() != c.want) {
			t.Errorf("parseModelRef(%q, %q) = %v, %v", c.model, c.rev, ref, err)
		}
	}
}

// TestFetchCommand runs `xpuinject fetch` against the test Hub, as a user would.
func TestFetchCommand(t *testing.T) {
	store := hubtest.NewStore()
	files := map[string]hubtest.File{
		"config.json":       {Data: []byte(`{"model_type":"llama"}`)},
		"model.safetensors": {Data: bytes.Repeat([]byte{7}, 50_000), LFS: true},
		"README.md":         {Data: []byte("hi")},
	}
	commit := store.Put("model", "org/m", "main", files)
	srv := hubtest.New(store)
	srv.Token = "hf_SECRETxyz0123456789"
	ts := srv.Start()
	defer ts.Close()
	cacheDir := t.TempDir()
	envm := map[string]string{"HF_ENDPOINT": ts.URL, "HF_HUB_CACHE": cacheDir, "HF_HOME": t.TempDir()}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		f := &Factory{In: strings.NewReader(""), Out: &out, ErrOut: &errb, Getenv: func(k string) string { return envm[k] }}
		return Main(args, f), out.String(), errb.String()
	}
	want := filepath.Join(cacheDir, "models--org--m", "snapshots", commit) + "\n"
	code, out, errs := run("fetch", "org/m")
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout %q (want %q), stderr %s", code, out, want, errs)
	}
	// Not a terminal: one plain line per file, no escape sequences.
	if !strings.Contains(errs, "fetched model.safetensors (50.0 kB") || !strings.Contains(errs, "fetched config.json") || strings.Contains(errs, "\x1b") {
		t.Errorf("stderr %q", errs)
	}
	code, out, errs = run("fetch", "org/m", "--quiet")
	if code != 0 || out != want || errs != "" {
		t.Errorf("--quiet: exit %d stdout %q stderr %q", code, out, errs)
	}
	envm["HF_HUB_OFFLINE"] = "1"
	code, out, _ = run("fetch", "org/m")
	if code != 0 || out != want {
		t.Errorf("offline: exit %d stdout %q", code, out)
	}
	code, _, errs = run("fetch", "org/other")
	if code != 1 || !strings.Contains(errs, "HF_HUB_OFFLINE") || !strings.Contains(errs, "org/other") {
		t.Errorf("offline, not cached: exit %d: %s", code, errs)
	}
	delete(envm, "HF_HUB_OFFLINE")
	store.Repo("model", "org/m").Gated = true
	os.RemoveAll(cacheDir)
	code, out, errs = run("fetch", "org/m")
	if code != 1 || out != "" || !strings.Contains(errs, "HF_TOKEN") {
		t.Errorf("gated without token: exit %d stdout %q stderr %s", code, out, errs)
	}
	envm["HF_TOKEN"] = srv.Token
	code, out, errs = run("fetch", "org/m", "--include", "*.json")
	if code != 0 || out != want || strings.Contains(out+errs, srv.Token) {
		t.Errorf("gated with token: exit %d stdout %q stderr %s", code, out, errs)
	}
	code, _, errs = run("fetch", "not a ref")
	if code != exitUsage {
		t.Errorf("bad ref: exit %d: %s", code, errs)
	}
}
