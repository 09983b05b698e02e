package models

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzReadHeader: ReadHeader never panics, fails only with one of its sentinels or an
// I/O error, and whatever parses satisfies the layout invariants and round-trips
// through WriteHeader. Seeds: every file in testdata/fuzz-seeds plus a few literals.
func FuzzReadHeader(f *testing.F) {
	files, err := filepath.Glob("testdata/fuzz-seeds/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	lit := func(h string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(b, h...), make([]byte, data)...)
	}
	f.Add(lit(`{"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}`, 8))
	f.Add(lit(`{"a":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]}}`, 1))
	f.Add(lit(`{"\u00e9\ud800":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}}`, 2))
	f.Add([]byte{})

	sentinels := []error{ErrTruncated, ErrHeaderTooLarge, ErrInvalidHeader, ErrUnknownDType, ErrBadOffsets, ErrSizeMismatch}
	f.Fuzz(func(t *testing.T, data []byte) {
		size := int64(len(data))
		h, err := ReadHeader(bytes.NewReader(data), size, "fuzz")
		if err != nil {
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		// Invariants: contiguous tensors tiling the data section exactly.
		at := h.DataStart
		for _, tt := range h.Tensors {
			if tt.Offset != at || tt.Size != tt.Elems()*int64(tt.DType.Size()) || tt.File != "fuzz" {
				t.Fatalf("tensor %q: offset %d size %d, expected offset %d", tt.Name, tt.Offset, tt.Size, at)
			}
			at += tt.Size
		}
		if at != size {
			t.Fatalf("tensors end at %d, file is %d bytes", at, size)
		}
		// Round trip through the writer.
		out := make([]*Tensor, len(h.Tensors))
		for i, tt := range h.Tensors {
			c := *tt
			out[i] = &c
		}
		var buf bytes.Buffer
		n, err := WriteHeader(&buf, out, h.Metadata)
		if err != nil {
			t.Fatalf("WriteHeader of a parsed header: %v", err)
		}
		buf.Write(data[h.DataStart:])
		h2, err := ReadHeader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "fuzz")
		if err != nil {
			t.Fatalf("re-reading the written header: %v\nheader: %q", err, buf.Bytes()[:n])
		}
		if !reflect.DeepEqual(h.Metadata, h2.Metadata) || len(h.Tensors) != len(h2.Tensors) {
			t.Fatalf("round trip changed metadata or tensor count: %v / %v", h.Metadata, h2.Metadata)
		}
		for i, a := range h.Tensors {
			b := h2.Tensors[i]
			if a.Name != b.Name || a.DType != b.DType || !reflect.DeepEqual(a.Shape, b.Shape) ||
				a.Size != b.Size || a.Offset-h.DataStart != b.Offset-h2.DataStart {
				t.Fatalf("round trip changed tensor %d: %+v → %+v", i, *a, *b)
			}
		}
	})
}
