package models

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// seedSentinel maps the bad-<what>- prefix of a fuzz seed's name to the error it must give.
var seedSentinel = map[string]error{
	"truncated": ErrTruncated,
	"toolarge":  ErrHeaderTooLarge,
	"invalid":   ErrInvalidHeader,
	"dtype":     ErrUnknownDType,
	"size":      ErrSizeMismatch,
	"offsets":   ErrBadOffsets,
}

func readBytes(b []byte, path string) (*Header, error) {
	return ReadHeader(bytes.NewReader(b), int64(len(b)), path)
}

// TestFuzzSeeds: every ok-* seed (written by the reference safetensors package, see
// testdata/make_fuzz_seeds.py) parses; every bad-<what>-* seed fails with its sentinel
// and names the file.
func TestFuzzSeeds(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz-seeds/*.safetensors")
	if err != nil || len(files) < 20 {
		t.Fatalf("seed corpus: %d files, %v", len(files), err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			h, err := readBytes(b, f)
			if strings.HasPrefix(base, "ok-") {
				if err != nil {
					t.Fatalf("valid seed rejected: %v", err)
				}
				if h.DataStart != 8+h.Len {
					t.Errorf("DataStart %d, Len %d", h.DataStart, h.Len)
				}
				return
			}
			what := strings.SplitN(strings.TrimPrefix(base, "bad-"), "-", 2)[0]
			want := seedSentinel[strings.TrimSuffix(what, ".safetensors")]
			if want == nil {
				t.Fatalf("seed name %q has no known sentinel", base)
			}
			if !errors.Is(err, want) {
				t.Fatalf("got %v, want %v", err, want)
			}
			if !strings.Contains(err.Error(), f) || !strings.HasPrefix(err.Error(), "models: ") {
				t.Errorf("error %q does not start with models: or name the file", err)
			}
		})
	}
}

func TestReadHeaderValues(t *testing.T) {
	b, err := os.ReadFile("testdata/fuzz-seeds/ok-mixed.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	h, err := readBytes(b, "mixed")
	if err != nil {
		t.Fatal(err)
	}
	n := int64(binary.LittleEndian.Uint64(b[:8]))
	if h.Len != n || h.DataStart != 8+n {
		t.Fatalf("Len %d DataStart %d, file says %d", h.Len, h.DataStart, n)
	}
	if !reflect.DeepEqual(h.Metadata, map[string]string{"format": "pt"}) {
		t.Errorf("metadata %v", h.Metadata)
	}
	type row struct {
		dtype DType
		shape []int64
		size  int64
	}
	want := map[string]row{
		"a.weight": {F16, []int64{3, 2}, 12},
		"b.bias":   {I64, []int64{5}, 40},
		"c":        {I32, []int64{}, 4},
		"d":        {F32, []int64{0, 4}, 0},
		"e":        {BOOL, []int64{2}, 2},
	}
	if len(h.Tensors) != len(want) {
		t.Fatalf("%d tensors, want %d", len(h.Tensors), len(want))
	}
	var end int64 = h.DataStart
	for _, tt := range h.Tensors {
		w, ok := want[tt.Name]
		if !ok {
			t.Fatalf("unexpected tensor %q", tt.Name)
		}
		if tt.DType != w.dtype || !reflect.DeepEqual(tt.Shape, w.shape) || tt.Size != w.size || tt.File != "mixed" {
			t.Errorf("%s: got %s %v size %d file %s, want %+v", tt.Name, tt.DType, tt.Shape, tt.Size, tt.File, w)
		}
		if tt.Offset != end {
			t.Errorf("%s: offset %d, want %d (contiguous, in data order)", tt.Name, tt.Offset, end)
		}
		end += tt.Size
	}
	if end != int64(len(b)) {
		t.Errorf("tensors end at %d, file has %d bytes", end, len(b))
	}
}

// TestReadHeaderErrors covers each rule with a minimal file, checking the sentinel and
// that the message names the tensor involved.
func TestReadHeaderErrors(t *testing.T) {
	file := func(header string, data int, length ...uint64) []byte {
		n := uint64(len(header))
		if len(length) > 0 {
			n = length[0]
		}
		out := binary.LittleEndian.AppendUint64(nil, n)
		out = append(out, header...)
		return append(out, make([]byte, data)...)
	}
	cases := []struct {
		name   string
		file   []byte
		want   error
		naming string
	}{
		{"empty file", nil, ErrTruncated, "8-byte"},
		{"header length past the end", file(`{}`, 0, 3), ErrTruncated, "header length 3"},
		{"header length past 100MB", file(`{}`, 0, MaxHeaderSize+1), ErrHeaderTooLarge, "100000001"},
		{"header length 2^64-1", file(`{}`, 0, ^uint64(0)), ErrHeaderTooLarge, ""},
		{"not json", file(`{"a":`, 0), ErrInvalidHeader, ""},
		{"json array", file(`[]`, 0), ErrInvalidHeader, "not a JSON object"},
		{"json null", file(`null`, 0), ErrInvalidHeader, "not a JSON object"},
		{"duplicate tensor", file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), ErrInvalidHeader, `duplicate key "w"`},
		{"duplicate metadata key", file(`{"__metadata__":{"a":"1","a":"2"}}`, 0), ErrInvalidHeader, `duplicate key "a"`},
		{"metadata number", file(`{"__metadata__":{"a":1}}`, 0), ErrInvalidHeader, "not a string"},
		{"metadata not object", file(`{"__metadata__":"x"}`, 0), ErrInvalidHeader, "__metadata__"},
		{"missing dtype", file(`{"w":{"shape":[1],"data_offsets":[0,1]}}`, 1), ErrInvalidHeader, `"w": no dtype`},
		{"missing shape", file(`{"w":{"dtype":"U8","data_offsets":[0,1]}}`, 1), ErrInvalidHeader, "no shape"},
		{"missing offsets", file(`{"w":{"dtype":"U8","shape":[1]}}`, 1), ErrInvalidHeader, "no data_offsets"},
		{"three offsets", file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 1), ErrInvalidHeader, "[begin, end]"},
		{"fractional dim", file(`{"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, 1), ErrInvalidHeader, "not an integer"},
		{"huge dim", file(`{"w":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,1]}}`, 1), ErrInvalidHeader, "not an integer"},
		{"negative dim", file(`{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, 1), ErrInvalidHeader, "negative"},
		{"unknown dtype", file(`{"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, 1), ErrUnknownDType, `tensor "w": dtype "Q4"`},
		{"dtype not string", file(`{"w":{"dtype":4,"shape":[1],"data_offsets":[0,1]}}`, 1), ErrInvalidHeader, "dtype"},
		{"size mismatch", file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), ErrSizeMismatch, `"w"`},
		{"element overflow", file(`{"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1), ErrSizeMismatch, "overflows"},
		{"byte overflow", file(`{"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,1]}}`, 1), ErrSizeMismatch, "overflows"},
		{"begin after end", file(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}}`, 2), ErrBadOffsets, `"w"`},
		{"negative offset", file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, 2), ErrBadOffsets, `"w"`},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}}`, 5), ErrBadOffsets, `"b" data [3, 5] overlaps tensor "a"`},
		{"same offsets", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 4), ErrBadOffsets, "overlaps"},
		{"gap", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), ErrBadOffsets, "gap"},
		{"bytes after last tensor", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 3), ErrBadOffsets, "cover 1 bytes but the data section has 3"},
		{"data past end", file(`{"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}}`, 3), ErrTruncated, `"a" data [0, 9] runs past the end`},
		{"garbage after object", file(`{}x`, 0), ErrInvalidHeader, "after the header object"},
		{"second object", file(`{}{}`, 0), ErrInvalidHeader, "after the header object"},
		{"invalid utf8", file("{\"\xc3\x28\":{}}", 0), ErrInvalidHeader, "UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readBytes(c.file, "f.safetensors")
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), "f.safetensors") || !strings.Contains(err.Error(), c.naming) {
				t.Errorf("error %q should name the file and contain %q", err, c.naming)
			}
		})
	}
}

func TestReadHeaderAccepts(t *testing.T) {
	cases := []struct {
		name, header string
		data         int
		tensors      int
	}{
		{"empty object", `{}`, 0, 0},
		{"padded with spaces", `{}      `, 0, 0},
		{"metadata only", `{"__metadata__":{"format":"pt"}}`, 0, 0},
		{"null metadata", `{"__metadata__":null}`, 0, 0},
		{"unknown field ignored", `{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":{"y":[1,2]}}}`, 2, 1},
		{"entries out of data order", `{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 2, 2},
		{"F8 dtypes", `{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[1,2]}}`, 2, 2},
		{"zero-size tensors share an offset", `{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0,3],"data_offsets":[0,0]}}`, 0, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := binary.LittleEndian.AppendUint64(nil, uint64(len(c.header)))
			b = append(append(b, c.header...), make([]byte, c.data)...)
			h, err := readBytes(b, "f")
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Tensors) != c.tensors {
				t.Fatalf("%d tensors, want %d", len(h.Tensors), c.tensors)
			}
			for i, tt := range h.Tensors {
				if i > 0 && tt.Offset < h.Tensors[i-1].Offset {
					t.Errorf("tensors not in data order")
				}
			}
		})
	}
}

// TestWriteHeaderMatchesReference: for one tensor, our writer produces the exact bytes
// the reference writer did (testdata/fuzz-seeds/ok-f32.safetensors, written by the
// safetensors package), header padding included.
func TestWriteHeaderMatchesReference(t *testing.T) {
	ref, err := os.ReadFile("testdata/fuzz-seeds/ok-f32.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	h, err := readBytes(ref, "ref")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tensors := []*Tensor{{Name: "w", DType: F32, Shape: []int64{2, 3}}}
	n, err := WriteHeader(&buf, tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != h.DataStart || !bytes.Equal(buf.Bytes(), ref[:h.DataStart]) {
		t.Fatalf("header differs from the reference:\n got %q\nwant %q", buf.Bytes(), ref[:h.DataStart])
	}
	if tensors[0].Offset != h.Tensors[0].Offset || tensors[0].Size != 24 {
		t.Errorf("WriteHeader set offset %d size %d, want %d 24", tensors[0].Offset, tensors[0].Size, h.Tensors[0].Offset)
	}
	empty, _ := os.ReadFile("testdata/fuzz-seeds/ok-empty.safetensors")
	buf.Reset()
	if _, err := WriteHeader(&buf, nil, nil); err != nil || !bytes.Equal(buf.Bytes(), empty) {
		t.Errorf("empty header %q (err %v), reference %q", buf.Bytes(), err, empty)
	}
}

func TestWriteHeaderRoundTrip(t *testing.T) {
	md := map[string]string{"format": "pt", "quote\"and<html>": "ünï\ncode"}
	in := []*Tensor{
		{Name: "b", DType: BF16, Shape: []int64{3, 5}},
		{Name: "a/ü", DType: F8E4M3, Shape: []int64{7}},
		{Name: "s", DType: I64, Shape: []int64{}},
	}
	var buf bytes.Buffer
	n, err := WriteHeader(&buf, in, md)
	if err != nil {
		t.Fatal(err)
	}
	if n%8 != 0 || int64(buf.Len()) != n {
		t.Fatalf("header %d bytes (returned %d), want a multiple of 8", buf.Len(), n)
	}
	data := int64(30 + 7 + 8)
	buf.Write(make([]byte, data))
	h, err := readBytes(buf.Bytes(), "rt")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Metadata, md) {
		t.Errorf("metadata %q, want %q", h.Metadata, md)
	}
	for i, tt := range h.Tensors {
		w := in[i]
		if tt.Name != w.Name || tt.DType != w.DType || !reflect.DeepEqual(tt.Shape, w.Shape) ||
			tt.Offset != w.Offset || tt.Size != w.Size {
			t.Errorf("tensor %d: read %+v, wrote %+v", i, *tt, *w)
		}
	}
	if _, err := WriteHeader(&buf, []*Tensor{{Name: "x", DType: "F7"}}, nil); !errors.Is(err, ErrUnknownDType) {
		t.Errorf("unknown dtype: %v", err)
	}
	if _, err := WriteHeader(&buf, []*Tensor{{Name: "x", DType: U8}, {Name: "x", DType: U8}}, nil); err == nil {
		t.Errorf("duplicate name accepted")
	}
	if _, err := WriteHeader(&buf, []*Tensor{{Name: "x", DType: F64, Shape: []int64{1 << 62}}}, nil); !errors.Is(err, ErrSizeMismatch) {
		t.Errorf("overflowing shape: %v", err)
	}
}

// A reader that fails is reported, not mistaken for a short file.
type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk on fire") }

func TestReadHeaderIOError(t *testing.T) {
	_, err := ReadHeader(failingReader{}, 100, "f")
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), "f:") {
		t.Fatalf("got %v", err)
	}
}

// A size larger than what the reader holds is a truncated file, not a panic or an
// unexplained EOF.
func TestReadHeaderSizeLies(t *testing.T) {
	b := binary.LittleEndian.AppendUint64(nil, 2)
	b = append(b, "{}"...)
	for _, size := range []int64{11, 1000} {
		if _, err := ReadHeader(bytes.NewReader(b[:9]), size, "f"); !errors.Is(err, ErrTruncated) {
			t.Errorf("size %d: got %v, want ErrTruncated", size, err)
		}
	}
	// An 8-byte file holding header length 0 ends at the empty header: "{}" is missing.
	if _, err := readBytes(make([]byte, 8), "f"); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("zero-length header: %v", err)
	}
}
