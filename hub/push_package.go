package hub

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/xpuinject/xpuinject/models"
)

// ErrNotPackage is returned when a folder does not look like a kernel-hub package.
var ErrNotPackage = errors.New("hub: not a kernel-hub package")

// variantName follows kernel-builder's discover_variants (kernel-builder/src/util.rs,
// kernels' BUILD_VARIANT_REGEX): build variants are folders named torch* or tvm-ffi*
// that hold a metadata.json.
var variantName = regexp.MustCompile(`^(torch|tvm-ffi)[A-Za-z0-9._-]*$`)

// KernelNamePattern is the rule for kernel names (DESIGN): lowercase letters, digits and
// dashes, from a letter to a letter or digit. Package emission checks names with it too.
var KernelNamePattern = regexp.MustCompile(`^[a-z][-a-z0-9]*[a-z0-9]$`)

// maxPackageFile bounds one file of a package: kernel packages are source code;
// anything this large is almost certainly a mistake (a checkpoint copied into build/).
const maxPackageFile = 2 << 30

// PackageFile is one file to publish: its content in Data, or in the local file Local
// (see LocalFile), which is hashed and uploaded in sections and never held whole.
type PackageFile struct {
	Path  string // repository path, slash-separated ("build/torch-cuda/layers.py")
	Data  []byte
	Local string // a local file holding the content instead of Data

	size   int64  // Local's size, sha256 and first 512 bytes, read by LocalFile
	sha256 string //
	sample []byte //
}

// LocalFile describes the local file for publishing at repoPath: its size, sha256 and
// first 512 bytes are read now, in one streamed pass.
func LocalFile(repoPath, local string) (PackageFile, error) {
	f, err := os.Open(local)
	if err != nil {
		return PackageFile{}, fmt.Errorf("hub: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return PackageFile{}, fmt.Errorf("hub: %w", err)
	}
	if !st.Mode().IsRegular() {
		return PackageFile{}, fmt.Errorf("hub: %s is not a regular file", local)
	}
	h := sha256.New()
	sample := make([]byte, 512)
	n, err := io.ReadFull(f, sample)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return PackageFile{}, fmt.Errorf("hub: reading %s: %w", local, err)
	}
	h.Write(sample[:n])
	rest, err := io.Copy(h, f)
	if err != nil {
		return PackageFile{}, fmt.Errorf("hub: reading %s: %w", local, err)
	}
	if int64(n)+rest != st.Size() {
		return PackageFile{}, fmt.Errorf("hub: %s changed while it was read (%d bytes read, %d listed)", local, int64(n)+rest, st.Size())
	}
	return PackageFile{Path: repoPath, Local: local, size: st.Size(), sha256: hex.EncodeToString(h.Sum(nil)), sample: sample[:n]}, nil
}

// Size is the content's length in bytes.
func (f PackageFile) Size() int64 {
	if f.Local != "" {
		return f.size
	}
	return int64(len(f.Data))
}

// SHA256 is the hex sha256 of the content (the LFS oid).
func (f PackageFile) SHA256() string {
	if f.Local != "" {
		return f.sha256
	}
	s := sha256.Sum256(f.Data)
	return hex.EncodeToString(s[:])
}

// GitSHA1 is the git blob id of the content (the oid the Hub lists for regular files); ""
// when a local file cannot be read.
func (f PackageFile) GitSHA1() string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", f.Size())
	if f.Local == "" {
		h.Write(f.Data)
	} else {
		r, err := f.open(0, f.size)()
		if err != nil {
			return ""
		}
		defer r.Close()
		if _, err := io.Copy(h, r); err != nil {
			return ""
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Sample is the first 512 bytes, what the preupload endpoint inspects
// (huggingface_hub lfs.py UploadInfo.sample).
func (f PackageFile) Sample() []byte {
	if f.Local != "" {
		return f.sample
	}
	if len(f.Data) > 512 {
		return f.Data[:512]
	}
	return f.Data
}

// Content is the whole content (for regular files, which are small).
func (f PackageFile) Content() ([]byte, error) {
	if f.Local == "" {
		return f.Data, nil
	}
	b, err := os.ReadFile(f.Local)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if int64(len(b)) != f.size {
		return nil, fmt.Errorf("hub: %s changed since it was hashed (%d bytes, was %d)", f.Local, len(b), f.size)
	}
	return b, nil
}

// open returns an opener for bytes [off, off+n) of the content: each call is a fresh
// reader, so a retried request can send the body again.
func (f PackageFile) open(off, n int64) func() (io.ReadCloser, error) {
	if f.Local == "" {
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.Data[off : off+n])), nil }
	}
	return func() (io.ReadCloser, error) {
		fh, err := os.Open(f.Local)
		if err != nil {
			return nil, fmt.Errorf("hub: %w", err)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.NewSectionReader(fh, off, n), fh}, nil
	}
}

// VariantMetadata is the part of a variant's metadata.json that publishing reads.
type VariantMetadata struct {
	Name    string `json:"name"`
	ID      string `json:"id"`
	Version *int   `json:"version"`
	License string `json:"license"`
	Backend struct {
		Type string `json:"type"`
	} `json:"backend"`
	// Model is optional: the model the package was generated for, when the writer records it.
	Model string `json:"model"`
}

// Package is a kernel-hub package read from disk.
type Package struct {
	Dir      string
	Variants []string                   // build variant folder names, sorted
	Metadata map[string]VariantMetadata // by variant
	Build    []PackageFile              // every file under build/<variant>/, sorted by path
	Card     PackageFile                // README.md
	// CardMeta holds the card's top-level front-matter scalars (and the first item of
	// top-level lists), e.g. library_name, license, base_model.
	CardMeta map[string]string
}

// Name is the kernel name from metadata.json.
func (p *Package) Name() string {
	if len(p.Variants) == 0 {
		return ""
	}
	return p.Metadata[p.Variants[0]].Name
}

// Version is the version every variant's metadata.json agrees on, or 0 if none says.
func (p *Package) Version() int {
	for _, v := range p.Variants {
		if m := p.Metadata[v]; m.Version != nil {
			return *m.Version
		}
	}
	return 0
}

// Model is the model the package was generated for, from the card's front matter
// (base_model, else model) or from metadata.json; "" when neither says.
func (p *Package) Model() string {
	for _, k := range []string{"base_model", "model"} {
		if v := p.CardMeta[k]; v != "" {
			return v
		}
	}
	for _, v := range p.Variants {
		if m := p.Metadata[v].Model; m != "" {
			return m
		}
	}
	return ""
}

// LoadPackage reads a kernel-hub package: DIR/README.md (the card, published to main)
// and DIR/build/<variant>/** (published to branch v<N>), where each variant folder
// holds a metadata.json. Python bytecode (__pycache__, *.pyc) is left out, as the
// kernels loader ignores it (kernels resolver.py _BYTECODE_IGNORE_PATTERNS).
func LoadPackage(dir string) (*Package, error) {
	p := &Package{Dir: dir, Metadata: map[string]VariantMetadata{}}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotPackage, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a folder", ErrNotPackage, dir)
	}
	buildDir := filepath.Join(dir, "build")
	entries, err := os.ReadDir(buildDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no build/ folder (want build/<variant>/metadata.json, e.g. build/torch-cuda/)", ErrNotPackage, dir)
		}
		return nil, fmt.Errorf("hub: reading %s: %w", buildDir, err)
	}
	for _, e := range entries {
		rel := "build/" + e.Name()
		if !e.IsDir() {
			return nil, fmt.Errorf("%w: %s: a file directly under build/ (files belong in a variant folder such as build/torch-cuda/)", ErrNotPackage, rel)
		}
		if !variantName.MatchString(e.Name()) {
			return nil, fmt.Errorf("%w: %s: not a build variant name (want torch-cuda, torch-xpu, torch-cpu, torch29-cxx11-cu128-x86_64-linux, …)", ErrNotPackage, rel)
		}
		meta, err := readVariantMetadata(filepath.Join(buildDir, e.Name(), "metadata.json"), rel+"/metadata.json")
		if err != nil {
			return nil, err
		}
		p.Variants = append(p.Variants, e.Name())
		p.Metadata[e.Name()] = meta
	}
	if len(p.Variants) == 0 {
		return nil, fmt.Errorf("%w: %s/build has no variant folder with a metadata.json", ErrNotPackage, dir)
	}
	sort.Strings(p.Variants)
	if err := p.checkMetadataAgrees(); err != nil {
		return nil, err
	}
	for _, v := range p.Variants {
		if err := p.readVariantFiles(buildDir, v); err != nil {
			return nil, err
		}
	}
	sort.Slice(p.Build, func(i, j int) bool { return p.Build[i].Path < p.Build[j].Path })

	card, err := readRegular(filepath.Join(dir, "README.md"), "README.md")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no README.md (the kernel card, published to main)", ErrNotPackage, dir)
		}
		return nil, err
	}
	p.Card = PackageFile{Path: "README.md", Data: card}
	meta, err := parseFrontMatter(card)
	if err != nil {
		return nil, fmt.Errorf("hub: README.md: %w", err)
	}
	p.CardMeta = meta
	return p, nil
}

func readVariantMetadata(file, rel string) (VariantMetadata, error) {
	var m VariantMetadata
	b, err := readRegular(file, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return m, fmt.Errorf("%w: %s missing (every build variant folder needs one)", ErrNotPackage, rel)
		}
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %s: %s", ErrNotPackage, rel, models.JSONError(err))
	}
	if !KernelNamePattern.MatchString(m.Name) {
		return m, fmt.Errorf("%w: %s: name %q does not match %s", ErrNotPackage, rel, m.Name, KernelNamePattern)
	}
	if m.Version != nil && *m.Version < 0 {
		return m, fmt.Errorf("%w: %s: version %d is negative", ErrNotPackage, rel, *m.Version)
	}
	return m, nil
}

// checkMetadataAgrees: kernel-builder refuses variants with different versions
// (detect_branch_from_metadata); a package with two names is two packages.
func (p *Package) checkMetadataAgrees() error {
	first := p.Metadata[p.Variants[0]]
	for _, v := range p.Variants[1:] {
		m := p.Metadata[v]
		if m.Name != first.Name {
			return fmt.Errorf("%w: build/%s/metadata.json names %q but build/%s/metadata.json names %q", ErrNotPackage, v, m.Name, p.Variants[0], first.Name)
		}
		if (m.Version == nil) != (first.Version == nil) || (m.Version != nil && *m.Version != *first.Version) {
			return fmt.Errorf("%w: build variants disagree on version: build/%s has %s, build/%s has %s", ErrNotPackage, p.Variants[0], fmtVersion(first.Version), v, fmtVersion(m.Version))
		}
	}
	return nil
}

func fmtVersion(v *int) string {
	if v == nil {
		return "none"
	}
	return strconv.Itoa(*v)
}

func (p *Package) readVariantFiles(buildDir, variant string) error {
	root := filepath.Join(buildDir, variant)
	return filepath.WalkDir(root, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("hub: reading package %s: %w", p.Dir, err)
		}
		rel, err := filepath.Rel(buildDir, file)
		if err != nil {
			return err
		}
		repoPath := path.Join("build", filepath.ToSlash(rel))
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".pyc") {
			return nil
		}
		b, err := readRegular(file, repoPath)
		if err != nil {
			return err
		}
		p.Build = append(p.Build, PackageFile{Path: repoPath, Data: b})
		return nil
	})
}

// readRegular reads a regular file (symlinks are followed only when they stay regular files).
func readRegular(file, rel string) ([]byte, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNotPackage, rel)
	}
	if fi.Size() > maxPackageFile {
		return nil, fmt.Errorf("%w: %s is %d bytes (over the %d-byte limit for a package file)", ErrNotPackage, rel, fi.Size(), int64(maxPackageFile))
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("hub: reading %s: %w", rel, err)
	}
	return b, nil
}

// parseFrontMatter reads the card's YAML front matter ("---" lines around it, as
// huggingface_hub's repocard.py REGEX_YAML_BLOCK) with yaml.v3. Top-level scalars and the
// first item of top-level lists of scalars are kept: that is all publishing needs
// (base_model, library_name). A card without front matter has none; an unterminated or
// malformed block is an error (the Hub rejects it).
func parseFrontMatter(card []byte) (map[string]string, error) {
	meta := map[string]string{}
	text := strings.ReplaceAll(string(bytes.TrimPrefix(card, []byte("\ufeff"))), "\r\n", "\n")
	if !strings.HasPrefix(text, "---\n") {
		return meta, nil
	}
	body, _, ok := strings.Cut(text[4:], "\n---")
	if !ok {
		if !strings.HasPrefix(text[4:], "---") {
			return nil, errors.New("front matter starts with --- but never ends")
		}
		body = "" // "---\n---": an empty block
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
		return nil, fmt.Errorf("front matter: %w", err)
	}
	for k, v := range doc {
		if list, ok := v.([]any); ok {
			v = nil
			if len(list) > 0 {
				v = list[0]
			}
		}
		switch v := v.(type) {
		case nil:
			meta[k] = ""
		case map[string]any, []any:
			// nested: nothing publishing reads
		default:
			meta[k] = fmt.Sprint(v)
		}
	}
	return meta, nil
}
