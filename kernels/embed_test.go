package kernels

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// The embedded tree must be exactly the package's .py files, contract.json and gpus/*.json on
// disk: a glob that drops __init__.py or _backend.py would produce packages that fail to import.
func TestEmbeddedSourcesComplete(t *testing.T) {
	disk, err := filepath.Glob(filepath.Join(SourceDir, "*.py"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := filepath.Glob(filepath.Join(SourceDir, GPUDir, "*.json"))
	if err != nil || len(gpus) == 0 {
		t.Fatalf("no %s/*.json on disk (%v)", GPUDir, err)
	}
	disk = append(append(disk, filepath.Join(SourceDir, ContractFile)), gpus...)
	var want []string
	for _, p := range disk {
		rel, _ := filepath.Rel(SourceDir, p)
		want = append(want, filepath.ToSlash(rel))
	}
	sort.Strings(want)
	got := SourceFiles()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("embedded %v, disk has %v", got, want)
	}
	for _, must := range []string{"__init__.py", "_backend.py", "layers.py", ContractFile, GPUDir + "/" + DefaultGPU() + ".json"} {
		found := false
		for _, g := range got {
			found = found || g == must
		}
		if !found {
			t.Errorf("embedded sources lack %s", must)
		}
	}
	for _, name := range got {
		b, err := Sources.ReadFile(SourceDir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := os.ReadFile(filepath.Join(SourceDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(d) {
			t.Errorf("%s: embedded content differs from disk", name)
		}
	}
}
