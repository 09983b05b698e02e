package kernels

import (
	"embed"
	"io/fs"
	"sort"
)

// Sources holds the Python kernel package (kernels/python/xpuinject_kernels) that every
// emitted kernel-hub package carries: its modules and contract.json.
//
// The patterns are explicit globs on purpose: a bare directory pattern silently skips
// files whose names start with "_" (so __init__.py and _backend.py would vanish), and
// "all:" would drag in __pycache__. embed_test.go checks the embedded set equals the
// files on disk.
//
//go:embed python/xpuinject_kernels/*.py python/xpuinject_kernels/contract.json
var Sources embed.FS

// SourceDir is the folder inside Sources that holds the package.
const SourceDir = "python/xpuinject_kernels"

// SourceFiles lists the embedded package's file names (base names), sorted.
func SourceFiles() []string {
	ents, err := fs.ReadDir(Sources, SourceDir)
	if err != nil {
		panic("kernels: embedded sources unreadable: " + err.Error()) // cannot happen: compiled in
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}
