package outdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func opts(kind string, replace bool, inputs ...Input) Options {
	return Options{Kind: kind, Tool: "xpuinject test", Replace: replace, Inputs: inputs}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func commit(t *testing.T, dest string, o Options, files map[string]string) error {
	t.Helper()
	tx, err := Begin(dest, o)
	if err != nil {
		return err
	}
	for k, v := range files {
		if err := tx.WriteFile(k, []byte(v)); err != nil {
			tx.Abort()
			return err
		}
	}
	return tx.Commit()
}

func TestBeginCommitReplace(t *testing.T) {
	root := t.TempDir()
	dest := filepath.Join(root, "a", "out")
	if err := commit(t, dest, opts(KindPackage, false), map[string]string{"x/y.txt": "1"}); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dest); !slices.Equal(got, []string{MarkerFile, "x"}) {
		t.Fatalf("output holds %v", got)
	}
	m, err := ReadMarker(dest)
	if err != nil || m.Kind != KindPackage || m.Tool != "xpuinject test" {
		t.Fatalf("marker %+v, %v", m, err)
	}
	// an earlier output of the same kind: only with Replace
	err = commit(t, dest, opts(KindPackage, false), map[string]string{"z": "2"})
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("replace without Replace: %v", err)
	}
	if err := commit(t, dest, opts(KindPackage, true), map[string]string{"z": "2"}); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dest); !slices.Equal(got, []string{MarkerFile, "z"}) {
		t.Fatalf("replaced output holds %v", got)
	}
	// another kind: never
	if err := commit(t, dest, opts(KindPacked, true), nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("other kind: %v", err)
	}
	if got := names(t, filepath.Dir(dest)); !slices.Equal(got, []string{"out"}) {
		t.Fatalf("leftovers beside the output: %v", got)
	}
}

func TestRefusals(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "model")
	write(t, filepath.Join(src, "config.json"), "{}")
	user := filepath.Join(root, "user")
	write(t, filepath.Join(user, "notes.txt"), "mine")
	file := filepath.Join(root, "file")
	write(t, file, "data")
	link := filepath.Join(root, "link")
	if err := os.Symlink(user, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	linkToSrc := filepath.Join(root, "srclink")
	if err := os.Symlink(src, linkToSrc); err != nil {
		t.Fatal(err)
	}
	in := Input{Path: src, What: "the source checkpoint"}
	for _, c := range []struct {
		dest, want string
	}{
		{user, "did not write"},
		{file, "is a regular file"},
		{link, "is a symlink"},
		{fifo, "named pipe"},
		{src, "is the source checkpoint"},
		{filepath.Join(src, "sub"), "is inside the source checkpoint"},
		{root, "contains the source checkpoint"},
		{filepath.Join(linkToSrc, "sub"), "is inside the source checkpoint"},
		{filepath.Join(file, "sub"), "a parent of it is a file"},
	} {
		err := commit(t, c.dest, opts(KindPacked, true, in), map[string]string{"a": "b"})
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want ErrRefused with %q", c.dest, err, c.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(user, "notes.txt")); string(b) != "mine" {
		t.Error("user file changed")
	}
	if b, _ := os.ReadFile(file); string(b) != "data" {
		t.Error("file changed")
	}
	if got := names(t, src); !slices.Equal(got, []string{"config.json"}) {
		t.Errorf("source holds %v", got)
	}
	if got := names(t, root); !slices.Equal(got, []string{"fifo", "file", "link", "model", "srclink", "user"}) {
		t.Errorf("root holds %v", got)
	}
}

func TestAbortLeavesEarlierOutput(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "out")
	if err := commit(t, dest, opts(KindEval, true), map[string]string{"eval.json": "1"}); err != nil {
		t.Fatal(err)
	}
	tx, err := Begin(dest, opts(KindEval, true))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.WriteFile("eval.json", []byte("2")); err != nil {
		t.Fatal(err)
	}
	tx.Abort()
	tx.Abort()
	if b, _ := os.ReadFile(filepath.Join(dest, "eval.json")); string(b) != "1" {
		t.Errorf("eval.json = %q after an aborted run", b)
	}
	if got := names(t, filepath.Dir(dest)); !slices.Equal(got, []string{"out"}) {
		t.Errorf("leftovers: %v", got)
	}
}

// TestCleanStale: temporaries of a dead writer go, a live writer's stay, and names that
// only look similar are never touched. A dead writer's .old whose output is missing is
// the earlier output caught between two renames: it is put back.
func TestCleanStale(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, ".out.xpuinject-00000000000000aa")
	write(t, dead+".lock", "1\n")
	write(t, dead+".new/model.safetensors", "x")
	write(t, dead+".old/plan.yaml", "x")
	orphan := filepath.Join(dir, ".out.xpuinject-00000000000000bb")
	write(t, orphan+".new/a", "x") // no lock file: its writer is gone
	live := filepath.Join(dir, ".out.xpuinject-00000000000000cc")
	write(t, live+".lock", "1\n")
	write(t, live+".new/a", "x")
	lf, err := os.Open(live + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{".out.xpuinject-short.new", "out.xpuinject-00000000000000dd.new", ".out.xpuinject-00000000000000ee.tmp", "user"} {
		write(t, filepath.Join(dir, n, "f"), "keep")
	}
	CleanStale(dir)
	want := []string{".out.xpuinject-00000000000000cc.lock", ".out.xpuinject-00000000000000cc.new",
		".out.xpuinject-00000000000000ee.tmp", ".out.xpuinject-short.new", "out", "out.xpuinject-00000000000000dd.new", "user"}
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("after CleanStale:\n%v\nwant\n%v", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "plan.yaml")); err != nil || string(b) != "x" {
		t.Errorf("the earlier output was not put back: %q, %v", b, err)
	}
}

func TestReadOnlyByHook(t *testing.T) {
	root := t.TempDir()
	restore := SetFault(func(op, path string) error {
		if op != "access" && strings.HasPrefix(path, root) {
			return &fs.PathError{Op: op, Path: path, Err: syscall.EROFS}
		}
		return nil
	})
	defer restore()
	err := commit(t, filepath.Join(root, "out"), opts(KindPacked, true), nil)
	if !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "cannot") {
		t.Fatalf("error %v, want EROFS", err)
	}
	if got := names(t, root); len(got) != 0 {
		t.Errorf("leftovers: %v", got)
	}
}

func TestEnsureDirAndRemove(t *testing.T) {
	root := filepath.Join(t.TempDir(), "run")
	o := opts(KindPipeline, false)
	if err := EnsureDir(root, o); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(root, o); err != nil {
		t.Fatalf("second EnsureDir: %v", err)
	}
	sub := filepath.Join(root, "eval")
	if err := commit(t, sub, opts(KindEval, false), map[string]string{"eval.json": "{}"}); err != nil {
		t.Fatal(err)
	}
	if err := Remove(sub, opts(KindPackage, true)); !errors.Is(err, ErrRefused) {
		t.Fatalf("Remove of another kind: %v", err)
	}
	if err := Remove(sub, opts(KindEval, false)); err != nil {
		t.Fatal(err)
	}
	if got := names(t, root); !slices.Equal(got, []string{MarkerFile}) {
		t.Errorf("after Remove: %v", got)
	}
	if err := Remove(sub, opts(KindEval, false)); err != nil {
		t.Errorf("Remove of a missing folder: %v", err)
	}
}
