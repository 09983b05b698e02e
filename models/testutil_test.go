package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

const fixtures = "../testdata/fixtures"

// copyFixture copies a fixture folder into a temp dir, so tests can corrupt it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(fixtures, name)
	dst := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("fixture %s: %v (made by the fixtures script)", name, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// editJSON rewrites a JSON file through edit.
func editJSON(t *testing.T, path string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editHeader rewrites a safetensors file's JSON header through edit, keeping the data
// section as it is (offsets are relative to it).
func editHeader(t *testing.T, path string, edit func(h map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var h map[string]any
	dec := json.NewDecoder(bytes.NewReader(b[8 : 8+n]))
	dec.UseNumber()
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	edit(h)
	hj, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	out = append(append(out, hj...), b[8+n:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// entry returns a tensor entry of a header map for editing.
func entry(t *testing.T, h map[string]any, name string) map[string]any {
	t.Helper()
	e, ok := h[name].(map[string]any)
	if !ok {
		t.Fatalf("header has no tensor %q", name)
	}
	return e
}
