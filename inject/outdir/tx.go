package outdir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
)

// A run's temporaries sit beside the output and share one token:
//
//	.<base>.xpuinject-<token>.lock   flock'ed by the writer for as long as it lives
//	.<base>.xpuinject-<token>.new    the output being assembled
//	.<base>.xpuinject-<token>.old    the output being replaced, on its way out
//	.<base>.xpuinject-<token>.gone   an output being removed (Remove)
//
// The lock file exists (locked) before the folders and goes after them, so a .new or
// .old without a lock file, or with one nobody holds, has no living writer.
//
// At no moment is <base> missing while an earlier output is to be kept: on Linux, Commit
// swaps .new and <base> in one renameat2(RENAME_EXCHANGE); elsewhere (or where the file
// system refuses the swap) <base> goes to .old before .new takes its name, and a .old
// whose <base> is missing is put back by the next cleanup (CleanStale).
var tempName = regexp.MustCompile(`^(\.(.*)\.xpuinject-[0-9a-f]{16})\.(lock|new|old|gone)$`)

// Tx is an output folder being written: files go under Dir, Commit puts the folder in
// place of dest, Abort (or a crash) leaves dest as it was.
type Tx struct {
	dest, abs, parent string
	o                 Options
	lock              *os.File
	lockPath          string
	newDir, oldDir    string
	done              bool
}

// Begin checks dest under o (Check), removes dead temporaries beside it, and starts a
// new output holding only the marker.
func Begin(dest string, o Options) (*Tx, error) {
	if err := Check(dest, o); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return nil, fmt.Errorf("output folder %s: %w", dest, err)
	}
	t := &Tx{dest: dest, abs: abs, parent: filepath.Dir(abs), o: o}
	if err := mkdirAll(t.parent); err != nil {
		return nil, fmt.Errorf("output folder %s: cannot create %s: %w", dest, t.parent, err)
	}
	CleanStale(t.parent)
	lock, prefix, err := newLock(t.parent, filepath.Base(abs))
	if err != nil {
		return nil, fmt.Errorf("output folder %s: cannot write in %s: %w", dest, t.parent, err)
	}
	t.lock, t.lockPath = lock, prefix+".lock"
	t.newDir, t.oldDir = prefix+".new", prefix+".old"
	if err := mkdir(t.newDir); err != nil {
		t.release()
		return nil, fmt.Errorf("output folder %s: cannot write in %s: %w", dest, t.parent, err)
	}
	if err := t.WriteFile(MarkerFile, markerBytes(o)); err != nil {
		t.Abort()
		return nil, err
	}
	return t, nil
}

// Dir is the folder to write into; it becomes dest at Commit.
func (t *Tx) Dir() string { return t.newDir }

// Path is the path of rel (slash-separated) inside Dir.
func (t *Tx) Path(rel string) string { return filepath.Join(t.newDir, filepath.FromSlash(rel)) }

// WriteFile writes b to rel inside Dir, creating parent folders, and syncs it.
func (t *Tx) WriteFile(rel string, b []byte) error {
	if !filepath.IsLocal(filepath.FromSlash(rel)) {
		return fmt.Errorf("output folder %s: %q is not a relative path inside it", t.dest, rel)
	}
	p := t.Path(rel)
	if err := mkdirAll(filepath.Dir(p)); err != nil {
		return fmt.Errorf("output folder %s: %w", t.dest, err)
	}
	f, err := Create(p)
	if err != nil {
		return fmt.Errorf("output folder %s: %w", t.dest, err)
	}
	if err := fault("write", p); err != nil {
		f.Close()
		return fmt.Errorf("output folder %s: write %s: %w", t.dest, rel, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("output folder %s: write %s: %w", t.dest, rel, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("output folder %s: write %s: %w", t.dest, rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("output folder %s: write %s: %w", t.dest, rel, err)
	}
	return nil
}

// Create makes a new file for writing (it must not exist). Every output file is
// created here or through Tx.WriteFile.
func Create(path string) (*os.File, error) {
	if err := fault("create", path); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}

// Commit puts Dir in place of dest: dest is checked again (it may have changed during a
// long run), moved aside if it exists, Dir renamed to dest, the old one removed.
func (t *Tx) Commit() error {
	if t.done {
		return fmt.Errorf("output folder %s: already committed or aborted", t.dest)
	}
	if err := syncTree(t.newDir); err != nil {
		t.Abort()
		return fmt.Errorf("output folder %s: %w", t.dest, err)
	}
	if err := checkExisting(t.dest, t.abs, t.o); err != nil {
		t.Abort()
		return err
	}
	if _, err := os.Lstat(t.abs); err == nil {
		swapped, err := exchange(t.newDir, t.abs)
		if err != nil {
			t.Abort()
			return fmt.Errorf("output folder %s: %w", t.dest, err)
		}
		if swapped {
			// .new now holds the earlier output: dest was never missing.
			syncDir(t.parent)
			remove(t.newDir)
			t.release()
			return nil
		}
		if err := rename(t.abs, t.oldDir); err != nil {
			t.Abort()
			return fmt.Errorf("output folder %s: moving the earlier output aside: %w", t.dest, err)
		}
		if err := rename(t.newDir, t.abs); err != nil {
			os.Rename(t.oldDir, t.abs)
			t.Abort()
			return fmt.Errorf("output folder %s: %w", t.dest, err)
		}
		syncDir(t.parent)
		remove(t.oldDir) // only now that dest is complete and marked
		t.release()
		return nil
	}
	if err := rename(t.newDir, t.abs); err != nil {
		t.Abort()
		return fmt.Errorf("output folder %s: %w", t.dest, err)
	}
	syncDir(t.parent)
	t.release()
	return nil
}

// Abort removes what was written; dest is left as it was. Safe to call more than once
// and after Commit.
func (t *Tx) Abort() {
	if t.done {
		return
	}
	os.RemoveAll(t.newDir)
	t.release()
}

func (t *Tx) release() {
	t.done = true
	if t.lock != nil {
		os.Remove(t.lockPath)
		t.lock.Close() // the flock goes with the descriptor
		t.lock = nil
	}
}

// EnsureDir makes dest an xpuinject folder of o.Kind that outputs are then written
// into (the pipeline's --out): created with its marker when missing or empty, kept as
// is when it already is one, refused otherwise.
func EnsureDir(dest string, o Options) error {
	o.Replace = true
	if err := Check(dest, o); err != nil {
		return err
	}
	if m, err := ReadMarker(dest); err == nil && m.Kind == o.Kind {
		return nil
	}
	t, err := Begin(dest, o)
	if err != nil {
		return err
	}
	return t.Commit()
}

// Remove deletes dest when it is an xpuinject output of o.Kind (nothing to do when
// missing): moved aside under a lock first, so a crash leaves a temporary that a later
// run removes.
func Remove(dest string, o Options) error {
	o.Replace = true
	if err := Check(dest, o); err != nil {
		return err
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return fmt.Errorf("output folder %s: %w", dest, err)
	}
	if _, err := os.Lstat(abs); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	lock, prefix, err := newLock(filepath.Dir(abs), filepath.Base(abs))
	if err != nil {
		return fmt.Errorf("output folder %s: cannot remove it: %w", dest, err)
	}
	t := &Tx{dest: dest, lock: lock, lockPath: prefix + ".lock"}
	defer t.release()
	// .gone, not .old: a cleanup after a crash here finishes the removal, never undoes it.
	if err := rename(abs, prefix+".gone"); err != nil {
		return fmt.Errorf("output folder %s: cannot remove it: %w", dest, err)
	}
	return remove(prefix + ".gone")
}

// CleanStale removes the temporaries in dir whose writer is gone. A temporary whose
// lock someone holds is left alone; so is every name that is not a temporary's. A .old
// is an earlier output caught between two renames: it is put back when its output is
// missing, and removed only when the output is there and marked.
func CleanStale(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	groups := map[string]map[string]fs.DirEntry{}
	outputs := map[string]string{} // temporary prefix -> the output's name
	for _, e := range ents {
		m := tempName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if groups[m[1]] == nil {
			groups[m[1]] = map[string]fs.DirEntry{}
			outputs[m[1]] = m[2]
		}
		groups[m[1]][m[3]] = e
	}
	for prefix, g := range groups {
		base := filepath.Join(dir, prefix)
		output := filepath.Join(dir, outputs[prefix])
		var held *os.File
		if _, ok := g["lock"]; ok {
			f, err := os.OpenFile(base+".lock", os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				continue // gone meanwhile, or not ours to judge
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				f.Close() // its writer is alive
				continue
			}
			held = f
		}
		if e, ok := g["old"]; ok && e.IsDir() {
			if _, err := os.Lstat(output); errors.Is(err, fs.ErrNotExist) {
				if os.Rename(base+".old", output) == nil {
					syncDir(dir)
				}
			} else if _, err := ReadMarker(output); err != nil {
				delete(g, "old") // an output that is not complete: keep the earlier one aside
			}
		}
		for _, s := range []string{"new", "old", "gone"} {
			if e, ok := g[s]; ok && e.IsDir() {
				os.RemoveAll(base + "." + s)
			} else if ok {
				os.Remove(base + "." + s)
			}
		}
		if held != nil {
			os.Remove(base + ".lock")
			held.Close()
		}
	}
}

// newLock creates and locks a fresh lock file beside base, and returns it with the
// token's path prefix. A cleaner that locked the new file for an instant (it looked
// unheld between create and flock) may have removed it: then try another token.
func newLock(parent, base string) (*os.File, string, error) {
	var last error
	for range 8 {
		var tok [8]byte
		if _, err := rand.Read(tok[:]); err != nil {
			return nil, "", err
		}
		prefix := filepath.Join(parent, "."+base+".xpuinject-"+hex.EncodeToString(tok[:]))
		f, err := Create(prefix + ".lock")
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			last = err
			continue
		}
		a, err1 := f.Stat()
		b, err2 := os.Lstat(prefix + ".lock")
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			f.Close()
			last = errors.New("lock file removed while being taken")
			continue
		}
		f.WriteString(strconv.Itoa(os.Getpid()) + "\n") // for people looking; the flock is what counts
		return f, prefix, nil
	}
	return nil, "", fmt.Errorf("cannot take a lock file: %v", last)
}

func mkdir(p string) error {
	if err := fault("mkdir", p); err != nil {
		return err
	}
	return os.Mkdir(p, 0o755)
}

func mkdirAll(p string) error {
	if err := fault("mkdir", p); err != nil {
		return err
	}
	return os.MkdirAll(p, 0o755)
}

func rename(from, to string) error {
	if err := fault("rename", to); err != nil {
		return err
	}
	return os.Rename(from, to)
}

// exchange swaps the folders a and b in one step where the system can (exchangeDirs);
// false, with no error, means it cannot here and the caller renames in two steps.
func exchange(a, b string) (bool, error) {
	if noExchange {
		return false, nil
	}
	if err := fault("exchange", b); err != nil {
		return false, err
	}
	return exchangeDirs(a, b)
}

// noExchange makes exchange answer false: for tests of the two-rename path.
var noExchange bool

func remove(p string) error {
	if err := fault("remove", p); err != nil {
		return err
	}
	return os.RemoveAll(p)
}

// syncTree fsyncs every folder of the tree (files are synced as they are written), so
// a committed output survives a power loss, not only a killed process.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			syncDir(p)
		}
		return nil
	})
}

func syncDir(p string) {
	if d, err := os.Open(p); err == nil {
		d.Sync()
		d.Close()
	}
}
