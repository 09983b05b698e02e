// Package outdir is the one place where xpuinject creates, replaces and removes output
// folders. Its rules:
//
//   - A folder is xpuinject's only when it holds the marker file MarkerFile (JSON: kind,
//     tool), written by Begin into every folder it assembles. Only such a folder, of the
//     same kind, is ever replaced or removed; an empty folder or a missing path may be
//     written; anything else (a folder of other files, a regular file, a symlink, a
//     device) is refused, whatever the flags.
//   - An output is never an input of the same run, never inside one and never contains
//     one (the source checkpoint, a package, a packed checkpoint, a text file).
//   - An output is assembled in a temporary sibling folder and renamed into place: a
//     reader sees the old output or the new one, never half of one. The temporary folder
//     belongs to the process holding an flock on its lock file; a later run removes the
//     temporaries whose writer is gone (killed, crashed) and never touches a live one.
package outdir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// MarkerFile is the file that makes a folder xpuinject's.
const MarkerFile = ".xpuinject-output"

// Kinds of output folders.
const (
	KindPacked   = "packed"   // xpuinject pack: packed safetensors + plan.yaml
	KindPackage  = "package"  // xpuinject package: the kernel-hub tree + shim
	KindEval     = "eval"     // xpuinject eval: eval.json, report.md, plots
	KindPipeline = "pipeline" // xpuinject MODEL: packed/, package/, eval/
)

var kinds = []string{KindPacked, KindPackage, KindEval, KindPipeline}

// Marker is the content of MarkerFile.
type Marker struct {
	Kind string `json:"kind"`
	Tool string `json:"tool"`
}

var (
	// ErrRefused: the output path may not be written whatever the flags (not ours, an
	// input of the run, a file or a symlink).
	ErrRefused = errors.New("outdir: refused")
	// ErrExists: the output path holds an earlier output of the same kind and the
	// caller did not allow replacing it (--force).
	ErrExists = errors.New("outdir: earlier output")
)

// ruleError is an error of ErrRefused or ErrExists kind whose message is err's alone.
type ruleError struct {
	kind error
	err  error
}

func (e *ruleError) Error() string        { return e.err.Error() }
func (e *ruleError) Unwrap() error        { return e.err }
func (e *ruleError) Is(target error) bool { return target == e.kind }

func refuse(format string, a ...any) error {
	return &ruleError{ErrRefused, fmt.Errorf(format, a...)}
}

func exists(format string, a ...any) error {
	return &ruleError{ErrExists, fmt.Errorf(format, a...)}
}

// Input is a file or folder a run reads; What names it in messages ("the source
// checkpoint", "the package").
type Input struct {
	Path string
	What string
}

// Options say what an output folder is and what may happen to an existing one.
type Options struct {
	Kind string // one of the Kind constants
	Tool string // "xpuinject <version>", recorded in the marker
	// Replace allows replacing an earlier output of the same kind (--force, or always
	// for outputs a command recomputes by design).
	Replace bool
	// Inputs are never written, replaced or removed: an output equal to one, inside one
	// or containing one is refused.
	Inputs []Input
}

// Check reports whether dest may be written under o, without writing anything. Begin
// checks again; commands call Check first so that a refused output fails before any
// heavy work.
func Check(dest string, o Options) error {
	abs, err := filepath.Abs(dest)
	if err != nil {
		return refuse("output %s: %w", dest, err)
	}
	if err := checkInputs(dest, abs, o.Inputs); err != nil {
		return err
	}
	return checkExisting(dest, abs, o)
}

// checkExisting applies the ownership rule to what is at abs now.
func checkExisting(dest, abs string, o Options) error {
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return refuse("output folder %s: a parent of it is a file, not a folder", dest)
	case err != nil:
		return refuse("output folder %s: %w", dest, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(abs)
		return refuse("output folder %s is a symlink (to %s); xpuinject replaces only folders it wrote: give the folder itself", dest, target)
	case !fi.IsDir():
		return refuse("output folder %s is %s; xpuinject writes folders and replaces only those it wrote: choose another --out", dest, describeType(fi.Mode()))
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return refuse("output folder %s: %w", dest, err)
	}
	if len(ents) > 0 {
		m, err := ReadMarker(abs)
		if err != nil {
			return refuse("output folder %s holds files xpuinject did not write (%v); choose another --out, or empty it yourself", dest, err)
		}
		if m.Kind != o.Kind {
			return refuse("output folder %s holds an xpuinject %s output, not a %s one; choose another --out", dest, m.Kind, o.Kind)
		}
		if !o.Replace {
			return exists("%s holds an earlier %s output; pass --force to replace it, or choose another --out", dest, o.Kind)
		}
	}
	if err := writable(abs); err != nil {
		return refuse("output folder %s is not writable: %w", dest, err)
	}
	return nil
}

// ReadMarker reads dir's marker; an error says why dir is not an xpuinject output.
func ReadMarker(dir string) (*Marker, error) {
	p := filepath.Join(dir, MarkerFile)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fmt.Errorf("no %s", MarkerFile)
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return nil, fmt.Errorf("%s is not a marker xpuinject writes", MarkerFile)
	}
	// O_NONBLOCK: a pipe swapped in after the Lstat must not block the open.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", MarkerFile, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a marker xpuinject writes", MarkerFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", MarkerFile, err)
	}
	var m Marker
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || !slices.Contains(kinds, m.Kind) {
		return nil, fmt.Errorf("%s is not a marker xpuinject writes", MarkerFile)
	}
	return &m, nil
}

// markerBytes is the marker of a new output: no time or process in it, so two runs
// write the same bytes.
func markerBytes(o Options) []byte {
	b, _ := json.Marshal(Marker{Kind: o.Kind, Tool: o.Tool})
	return append(b, '\n')
}

// checkInputs refuses an output that is, is inside, or contains an input. Paths are
// compared after resolving symlinks (an HF snapshot is a folder of links into blobs/),
// and literally, so a link cannot hide either way.
func checkInputs(dest, abs string, inputs []Input) error {
	outs := []string{abs}
	if r := resolve(abs); r != abs {
		outs = append(outs, r)
	}
	for _, in := range inputs {
		if in.Path == "" {
			continue
		}
		ia, err := filepath.Abs(in.Path)
		if err != nil {
			continue
		}
		ins := []string{ia}
		if r := resolve(ia); r != ia {
			ins = append(ins, r)
		}
		for _, o := range outs {
			for _, i := range ins {
				switch {
				case o == i:
					return refuse("output folder %s is %s, which this run reads; choose another --out", dest, in.What)
				case within(o, i):
					return refuse("output folder %s is inside %s %s, which this run reads; choose another --out", dest, in.What, in.Path)
				case within(i, o):
					return refuse("output folder %s contains %s %s, which this run reads; choose another --out", dest, in.What, in.Path)
				}
			}
		}
	}
	return nil
}

// within reports whether p is strictly below dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// resolve follows symlinks of the longest existing prefix of p.
func resolve(p string) string {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// writable reports whether the process may change dir (access(2) with W_OK: the
// kernel's answer, which knows about read-only mounts and, for root, ignores modes).
func writable(dir string) error {
	if err := fault("access", dir); err != nil {
		return err
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return &fs.PathError{Op: "access", Path: dir, Err: err}
	}
	return nil
}

// describeType names a file's type for messages.
func describeType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a folder"
	}
	return "not a regular file or folder"
}
