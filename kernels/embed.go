package kernels

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

// Sources holds the Python kernel package (kernels/python/xpuinject_kernels) that every
// emitted kernel-hub package carries: its modules, contract.json and the per-GPU data
// (gpus/*.json).
//
// The patterns are explicit globs on purpose: a bare directory pattern silently skips
// files whose names start with "_" (so __init__.py and _backend.py would vanish), and
// "all:" would drag in __pycache__. embed_test.go checks the embedded set equals the
// files on disk.
//
//go:embed python/xpuinject_kernels/*.py python/xpuinject_kernels/contract.json python/xpuinject_kernels/gpus/*.json
var Sources embed.FS

// SourceDir is the folder inside Sources that holds the package.
const SourceDir = "python/xpuinject_kernels"

// SourceFiles lists the embedded package's files, slash-separated paths relative to
// SourceDir ("gemm.py", "gpus/h200.json"), sorted.
func SourceFiles() []string {
	var out []string
	err := fs.WalkDir(Sources, SourceDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, SourceDir+"/"))
		}
		return err
	})
	if err != nil {
		panic("kernels: embedded sources unreadable: " + err.Error()) // cannot happen: compiled in
	}
	sort.Strings(out)
	return out
}
