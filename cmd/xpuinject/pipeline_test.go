package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A re-run over an earlier run without --force is refused before any work: no plan, no
// fetch, exit 2, and the message names the fix.
func TestPipelineRerunWithoutForceRefusedFirst(t *testing.T) {
	root := t.TempDir()
	m := copyFixture(t, "llama-tiny", filepath.Join(root, "llama-tiny"))
	out := filepath.Join(root, "run")
	if code, _, errOut := runCLI(t, nil, m, "--out", out, "--skip-eval"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errOut)
	}
	before, err := os.ReadFile(filepath.Join(out, "packed", "plan.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The default --out too (out/<kernel name>, from the folder's name), run from root.
	wd, _ := os.Getwd()
	if err := os.Chdir(root); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	if code, _, errOut := runCLI(t, nil, m, "--skip-eval"); code != 0 {
		t.Fatalf("default --out: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{m, "--out", out, "--skip-eval"}, {m, "--skip-eval"}} {
		code, stdout, errOut := runCLI(t, nil, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(errOut, "--force") {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want exit 2 naming --force", args, code, stdout, errOut)
		}
		if strings.Contains(errOut, "resolve ") || strings.Contains(errOut, "plan:") {
			t.Errorf("%v: refused only after work began:\n%s", args, errOut)
		}
	}
	after, _ := os.ReadFile(filepath.Join(out, "packed", "plan.yaml"))
	if string(after) != string(before) {
		t.Error("the refused run changed the earlier run's plan.yaml")
	}
}

// --push of a model from a local folder needs the Hub id its cards will name, asked for
// before any work; a malformed one is refused the same way.
func TestPipelinePushOfALocalFolderAsksForTheSourceRepo(t *testing.T) {
	tiny := filepath.Join(fixtures, "llama-tiny")
	out := filepath.Join(t.TempDir(), "run")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{tiny, "--out", out, "--push", "--repo-id", "a/b"}, "pass --source-repo-id ORG/NAME[@REVISION]"},
		{[]string{tiny, "--out", out, "--push", "--repo-id", "a/b", "--source-repo-id", "nope"},
			`--source-repo-id "nope": want ORG/NAME[@REVISION]`},
	} {
		code, stdout, errOut := runCLI(t, nil, c.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "resolve ") {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit 2 and %q before any work", c.args, code, stdout, errOut, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused run left %s", out)
	}
}
