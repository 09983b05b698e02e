package hub_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/hub"
)

func TestLoadPackage(t *testing.T) {
	files := pushPkgFiles("1")
	files["build/torch-cuda/__pycache__/layers.cpython-311.pyc"] = "bytecode"
	files["build/torch-xpu/stale.pyc"] = "bytecode"
	files["build.toml"] = "[general]\nname = \"tiny-kernels\"\n"
	p, err := hub.LoadPackage(pushWritePkg(t, files))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range p.Build {
		paths = append(paths, f.Path)
	}
	want := "build/torch-cuda/__init__.py,build/torch-cuda/layers.py,build/torch-cuda/metadata.json,build/torch-cuda/table.bin," +
		"build/torch-xpu/__init__.py,build/torch-xpu/layers.py,build/torch-xpu/metadata.json"
	if got := strings.Join(paths, ","); got != want {
		t.Errorf("build files\n%s\nwant\n%s", got, want)
	}
	if p.Name() != "tiny-kernels" || p.Version() != 1 || p.Model() != "org/tiny-llama" || strings.Join(p.Variants, ",") != "torch-cuda,torch-xpu" {
		t.Errorf("name %q version %d model %q variants %v", p.Name(), p.Version(), p.Model(), p.Variants)
	}
	if p.CardMeta["library_name"] != "kernels" || p.Card.Path != "README.md" {
		t.Errorf("card %+v", p.CardMeta)
	}
}

func TestLoadPackageErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(files map[string]string)
		want   string
	}{
		{"no build", func(f map[string]string) {
			for p := range f {
				if strings.HasPrefix(p, "build/") {
					delete(f, p)
				}
			}
		}, "has no build/ folder"},
		{"no README", func(f map[string]string) { delete(f, "README.md") }, "has no README.md"},
		{"variant without metadata", func(f map[string]string) { delete(f, "build/torch-xpu/metadata.json") }, "build/torch-xpu/metadata.json missing"},
		{"not a variant name", func(f map[string]string) { f["build/extras/x.py"] = "" }, "build/extras: not a build variant name"},
		{"file directly in build", func(f map[string]string) { f["build/notes.txt"] = "" }, "build/notes.txt: a file directly under build/"},
		{"bad metadata JSON", func(f map[string]string) { f["build/torch-xpu/metadata.json"] = "{" }, "build/torch-xpu/metadata.json"},
		{"bad kernel name", func(f map[string]string) {
			f["build/torch-xpu/metadata.json"] = `{"name": "Tiny_Kernels", "version": 1}`
		}, `name "Tiny_Kernels" does not match`},
		{"names disagree", func(f map[string]string) {
			f["build/torch-xpu/metadata.json"] = `{"name": "other-kernels", "version": 1}`
		}, `names "other-kernels"`},
		{"versions disagree", func(f map[string]string) {
			f["build/torch-xpu/metadata.json"] = `{"name": "tiny-kernels", "version": 2}`
		}, "disagree on version"},
		{"unterminated front matter", func(f map[string]string) { f["README.md"] = "---\nlibrary_name: kernels\n" }, "front matter starts with --- but never ends"},
		{"malformed front matter", func(f map[string]string) { f["README.md"] = "---\nbase_model: [org/x\n---\n" }, "front matter: yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := pushPkgFiles("1")
			tc.change(files)
			dir := pushWritePkg(t, files)
			if _, err := os.Stat(filepath.Join(dir, "build")); err != nil {
				os.MkdirAll(filepath.Join(dir, "x"), 0o755) // keep dir non-empty
			}
			_, err := hub.LoadPackage(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if !strings.HasSuffix(tc.name, "front matter") && !errors.Is(err, hub.ErrNotPackage) {
				t.Errorf("%v is not ErrNotPackage", err)
			}
		})
	}
	if _, err := hub.LoadPackage(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, hub.ErrNotPackage) {
		t.Errorf("missing dir: %v", err)
	}
}

func TestPackageModelFromFrontMatter(t *testing.T) {
	for _, tc := range []struct{ card, meta, want string }{
		{"---\nbase_model: org/a\n---\n", "", "org/a"},
		{"---\nbase_model:\n- org/b\n- org/c\n---\n", "", "org/b"},
		{"---\nbase_model: [\"org/d\", org/e]\n---\n", "", "org/d"},
		{"---\nlicense: mit\nmodel: 'org/f' # comment\n---\n", "", "org/f"},
		{"---\r\nbase_model: org/g\r\n---\r\n", "", "org/g"},
		{"# no front matter\n", `, "model": "org/h"`, "org/h"},
		{"---\ntags:\n  - base_model: org/nested\n---\n", "", ""},
		{"# nothing\n", "", ""},
		// YAML a line parser misreads: a folded scalar, a flow list with a quoted comma
		{"---\nbase_model: >-\n  org/folded\n---\n", "", "org/folded"},
		{"---\nbase_model: [\"org/i,j\", org/k]\n---\n", "", "org/i,j"},
	} {
		files := pushPkgFiles("1")
		files["README.md"] = tc.card
		for _, v := range []string{"cuda", "xpu"} {
			files["build/torch-"+v+"/metadata.json"] = `{"name": "tiny-kernels", "version": 1` + tc.meta + `}`
		}
		p, err := hub.LoadPackage(pushWritePkg(t, files))
		if err != nil {
			t.Fatalf("%q: %v", tc.card, err)
		}
		if p.Model() != tc.want {
			t.Errorf("card %q: model %q, want %q", tc.card, p.Model(), tc.want)
		}
	}
}

func TestPredictUploadMode(t *testing.T) {
	for _, tc := range []struct {
		path string
		data string
		want string
	}{
		{"a.py", "print(1)\n", "regular"},
		{"empty.bin", "", "regular"},
		{"w.bin", "text but .bin", "lfs"},
		{"w.SAFETENSORS", "x", "lfs"},
		{"blob", "ab\x00cd", "lfs"},
		{"big.txt", strings.Repeat("a", 10<<20), "lfs"},
		{"late-nul.txt", strings.Repeat("a", 600) + "\x00", "regular"}, // only the 512-byte sample is looked at
	} {
		if got := hub.PredictUploadMode(hub.PackageFile{Path: tc.path, Data: []byte(tc.data)}); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.path, got, tc.want)
		}
	}
}
