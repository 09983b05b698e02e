package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Names of the files a checkpoint folder holds.
const (
	ConfigFile = "config.json"
	IndexFile  = "model.safetensors.index.json"
)

// MaxSmallFile bounds the side files xpuinject reads whole (config.json, the index,
// plan.yaml, metadata.json); real ones are kilobytes.
const MaxSmallFile = 64 << 20

var (
	// ErrNoConfig: the folder has no config.json (wraps fs.ErrNotExist too).
	ErrNoConfig = errors.New("models: no config.json")
	// ErrBadConfig: config.json is not a JSON object or has no usable model_type.
	ErrBadConfig = errors.New("models: invalid config.json")
	// ErrBadIndex: model.safetensors.index.json is invalid or disagrees with the shards.
	ErrBadIndex = errors.New("models: invalid safetensors index")
	// ErrMissingShard: a shard named in the index does not exist.
	ErrMissingShard = errors.New("models: shard missing")
	// ErrNoWeights: the folder has no safetensors files.
	ErrNoWeights = errors.New("models: no safetensors weights")
	// ErrMissingTensor: a tensor an architecture needs is in no shard.
	ErrMissingTensor = errors.New("models: tensor missing")
	// ErrDuplicateTensor: two files hold a tensor of the same name.
	ErrDuplicateTensor = errors.New("models: tensor in more than one file")
)

// Open reads a checkpoint folder's config.json and the headers of its safetensors
// files: the shards named by model.safetensors.index.json when present, else every
// *.safetensors in the folder. No tensor data is read.
func Open(dir string) (*Checkpoint, error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	raw, err := ReadSmallFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s (is it a transformers checkpoint folder?): %w", ErrNoConfig, dir, err)
	} else if err != nil && !errors.Is(err, ErrNotRegular) {
		return nil, fmt.Errorf("models: %w", err)
	} else if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrBadConfig, cfgPath, JSONError(err))
	}
	if cfg == nil {
		return nil, fmt.Errorf("%w: %s: not a JSON object", ErrBadConfig, cfgPath)
	}
	mt, ok := cfg["model_type"].(string)
	if !ok || mt == "" {
		return nil, fmt.Errorf("%w: %s: no \"model_type\" string (supported: %s)",
			ErrBadConfig, cfgPath, strings.Join(Supported(), ", "))
	}
	ck := &Checkpoint{
		Dir:        dir,
		ModelType:  mt,
		Config:     cfg,
		ConfigJSON: raw,
		Tensors:    map[string]*Tensor{},
		Metadata:   map[string]map[string]string{},
	}
	idxPath := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(idxPath); err == nil {
		err = ck.openSharded(idxPath)
		if err == nil {
			err = checkQuantized(ck)
		}
		if err != nil {
			return nil, err
		}
		return ck, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("models: %s: %w", idxPath, err)
	}
	// os.ReadDir, not filepath.Glob: the folder name may hold glob metacharacters.
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	var files []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s has neither %s nor *.safetensors files (pickled .bin weights are not read)",
			ErrNoWeights, dir, IndexFile)
	}
	sort.Strings(files)
	for _, f := range files {
		if _, err := ck.addFile(f); err != nil {
			return nil, err
		}
	}
	if err := checkQuantized(ck); err != nil {
		return nil, err
	}
	return ck, nil
}

// Load opens a checkpoint and maps it to layers with its architecture's builder.
func Load(dir string) (*Graph, error) {
	ck, err := Open(dir)
	if err != nil {
		return nil, err
	}
	arch, err := Lookup(ck.ModelType)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, filepath.Join(dir, ConfigFile))
	}
	return arch.Build(ck)
}

// openSharded reads the index and the headers of the shards it names, and checks that
// index and shards agree tensor by tensor.
func (ck *Checkpoint) openSharded(idxPath string) error {
	raw, err := ReadSmallFile(idxPath)
	if errors.Is(err, ErrNotRegular) {
		return err
	} else if err != nil {
		return fmt.Errorf("models: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return fmt.Errorf("%w: %s: %s", ErrBadIndex, idxPath, JSONError(err))
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%w: %s: no \"weight_map\" entries", ErrBadIndex, idxPath)
	}
	byShard := map[string][]string{}
	for tensor, shard := range idx.WeightMap {
		// Shard names are paths relative to the folder; refuse ones that leave it.
		if !filepath.IsLocal(shard) {
			return fmt.Errorf("%w: %s: tensor %q: shard path %q leaves the checkpoint folder", ErrBadIndex, idxPath, tensor, shard)
		}
		byShard[shard] = append(byShard[shard], tensor)
	}
	shards := make([]string, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, s := range shards {
		p := filepath.Join(ck.Dir, s)
		names := byShard[s]
		sort.Strings(names)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s names shard %q for %d tensors (e.g. %q), but it does not exist: %w",
				ErrMissingShard, idxPath, s, len(names), names[0], err)
		}
		h, err := ck.addFile(p)
		if err != nil {
			return err
		}
		for _, t := range h.Tensors {
			if want, ok := idx.WeightMap[t.Name]; !ok {
				return fmt.Errorf("%w: %s: tensor %q is in shard %s but not in the index's weight_map", ErrBadIndex, idxPath, t.Name, s)
			} else if filepath.Clean(want) != filepath.Clean(s) {
				return fmt.Errorf("%w: %s: tensor %q is in shard %s but the index says %s", ErrBadIndex, idxPath, t.Name, s, want)
			}
		}
		for _, name := range names {
			if t, ok := ck.Tensors[name]; !ok || t.File != p {
				return fmt.Errorf("%w: %s: index says tensor %q is in %s, but that shard does not hold it",
					ErrBadIndex, idxPath, name, s)
			}
		}
	}
	return nil
}

// addFile reads one safetensors header and adds its tensors.
func (ck *Checkpoint) addFile(path string) (*Header, error) {
	f, st, err := OpenRegular(path)
	if err != nil {
		if errors.Is(err, ErrNotRegular) {
			return nil, err
		}
		return nil, fmt.Errorf("models: %w", err)
	}
	defer f.Close()
	h, err := ReadHeader(f, st.Size(), path)
	if err != nil {
		return nil, err
	}
	for _, t := range h.Tensors {
		if prev, dup := ck.Tensors[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q is in %s and in %s", ErrDuplicateTensor, t.Name, prev.File, path)
		}
		ck.Tensors[t.Name] = t
	}
	ck.Files = append(ck.Files, path)
	sort.Strings(ck.Files)
	if h.Metadata != nil {
		ck.Metadata[path] = h.Metadata
	}
	return h, nil
}

// Need returns the tensor an architecture needs, checked against the shape the config
// implies: a missing tensor is an ErrMissingTensor error listing the files searched, a
// shape mismatch a *ShapeError. because says what in the config implies shape.
func (ck *Checkpoint) Need(name string, shape []int64, because string) (*Tensor, error) {
	t, ok := ck.Tensors[name]
	if !ok {
		files := make([]string, len(ck.Files))
		for i, f := range ck.Files {
			files[i] = filepath.Base(f)
		}
		return nil, fmt.Errorf("%w: tensor %q is in no shard of %s (searched %s)",
			ErrMissingTensor, name, ck.Dir, strings.Join(files, ", "))
	}
	if !equalShape(t.Shape, shape) {
		return nil, &ShapeError{Tensor: name, Want: append([]int64{}, shape...), Got: append([]int64{}, t.Shape...), Because: because}
	}
	return t, nil
}

// AddView registers name as a contiguous part of the checkpoint tensor of: shape
// elements from element offset elem on, in its bytes. Checkpoints that store experts
// stacked in one tensor ([experts, rows, cols]) give each expert's projection a name of
// its own this way, so layers and the packer read it as any 2D tensor. The parent counts
// as owned wherever a view of it is.
func (ck *Checkpoint) AddView(name, of string, elem int64, shape []int64) error {
	p, ok := ck.Tensors[of]
	if !ok {
		return fmt.Errorf("%w: tensor %q is in no shard of %s", ErrMissingTensor, of, ck.Dir)
	}
	v := &Tensor{Name: name, DType: p.DType, Shape: append([]int64{}, shape...), File: p.File, Of: of}
	n := v.Elems()
	es := int64(p.DType.Size())
	if elem < 0 || n <= 0 || elem > p.Elems()-n || es == 0 {
		return fmt.Errorf("models: view %q of %q: elements [%d, %d) outside its %d", name, of, elem, elem+n, p.Elems())
	}
	v.Offset, v.Size = p.Offset+elem*es, n*es
	if prev, dup := ck.Tensors[name]; dup {
		if prev.Of == of && prev.Offset == v.Offset && equalShape(prev.Shape, shape) {
			return nil // the same view, from an earlier build of this checkpoint
		}
		return fmt.Errorf("models: view %q of %q: the checkpoint already has a tensor of that name", name, of)
	}
	ck.Tensors[name] = v
	return nil
}

// Has reports whether the checkpoint holds a tensor of that name.
func (ck *Checkpoint) Has(name string) bool {
	_, ok := ck.Tensors[name]
	return ok
}

// OpenTensor opens the file holding t and returns a reader over exactly its bytes and
// the file to close when done. It checks that the file still holds t's extent.
func OpenTensor(t *Tensor) (*io.SectionReader, io.Closer, error) {
	f, st, err := OpenRegular(t.File)
	if err != nil {
		return nil, nil, fmt.Errorf("models: tensor %q: %w", t.Name, err)
	}
	if t.Offset < 0 || t.Size < 0 || t.Offset > st.Size()-t.Size {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s: tensor %q data [%d, %d) is past the end of the file (%d bytes)",
			ErrTruncated, t.File, t.Name, t.Offset, t.Offset+t.Size, st.Size())
	}
	return io.NewSectionReader(f, t.Offset, t.Size), f, nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ReadSmallFile reads a regular file (never a pipe or device) of at most MaxSmallFile
// bytes. Errors are unprefixed.
func ReadSmallFile(path string) ([]byte, error) {
	f, _, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSmallFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxSmallFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxSmallFile)
	}
	return b, nil
}
