package xpuinject_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/xpuinject/xpuinject"

// layers lists, for every package of the module, the module packages it may import (its
// non-test imports): cmd -> inject/* -> kernels -> models, with hub and harness beside
// them near the bottom (docs/architecture.md). Go already rejects cycles; this keeps the
// direction. A new package fails the test until it is given its place here.
var layers = map[string][]string{
	"cmd/xpuinject":     {"harness", "hub", "inject/emit", "inject/outdir", "inject/pack", "inject/plan", "kernels", "models"},
	"cmd/hubtestserver": {"hub/hubtest"},
	"inject/emit":       {"hub", "inject/outdir", "inject/pack", "inject/plan", "kernels", "models"},
	"inject/pack":       {"inject/outdir", "inject/plan", "kernels", "models"},
	"inject/plan":       {"kernels", "models"},
	"inject/outdir":     {},
	"kernels":           {"models"},
	"harness":           {"inject/outdir", "models"},
	"hub":               {"models"},
	"hub/hubtest":       {},
	"models":            {},
}

func TestLayering(t *testing.T) {
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			return nil
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel := filepath.ToSlash(path)
		if rel == "." {
			return nil // this test
		}
		seen[rel] = true
		allowed, ok := layers[rel]
		if !ok {
			t.Errorf("package %s has no place in layering_test.go's layers: add it with the module packages it may import", rel)
			return nil
		}
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if ok && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s: not allowed by the layering (may import: %s)", rel, dep, strings.Join(allowed, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range layers {
		if !seen[p] {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("layers names %s, which is not a package any more", p)
			}
		}
	}
}
