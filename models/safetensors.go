package models

// A safetensors header reader and writer of our own: nlpodyssey/safetensors cannot
// read a header without the whole buffer and rejects F8 dtypes (DESIGN.md).
//
// Format and validation rules follow the reference implementation,
// huggingface/safetensors safetensors/src/tensor.rs (SafeTensors::read_metadata and
// Metadata::validate):
//   - 8 bytes: N, a little-endian u64, the length of the JSON header; N <= 100,000,000
//     (MAX_HEADER_SIZE) and 8+N <= file size;
//   - N bytes: a UTF-8 JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]},
//     "__metadata__": {string: string}}; trailing spaces pad it to a multiple of 8;
//   - the rest: the data section. Sorted by offsets, the tensors must be contiguous from 0
//     (no gap, no overlap: "s != start" is InvalidOffset), each end-begin must equal
//     product(shape)*dtype size (computed with overflow checks: ValidationOverflow,
//     TensorInvalidInfo), and the last end must be exactly the data section's length
//     (MetadataIncompleteBuffer).
// We are stricter than the reference in two places: duplicate JSON keys are an error
// (serde silently keeps one), and so is anything but whitespace after the JSON object.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize bounds the JSON header length, as the reference implementation does
// (MAX_HEADER_SIZE = 100_000_000 in safetensors/src/tensor.rs).
const MaxHeaderSize = 100_000_000

// Sentinel errors of the safetensors reader. Returned errors wrap one of them and name
// the file (and the tensor where one is involved).
var (
	// ErrTruncated: the file ends before the 8-byte length, the header or a tensor's data.
	ErrTruncated = errors.New("models: safetensors file truncated")
	// ErrHeaderTooLarge: the header length exceeds MaxHeaderSize.
	ErrHeaderTooLarge = errors.New("models: safetensors header too large")
	// ErrInvalidHeader: the header is not UTF-8, not a JSON object, has duplicate keys,
	// a malformed tensor entry, a negative dimension or non-string metadata.
	ErrInvalidHeader = errors.New("models: invalid safetensors header")
	// ErrUnknownDType: a tensor's dtype is not one safetensors defines.
	ErrUnknownDType = errors.New("models: unknown safetensors dtype")
	// ErrBadOffsets: data_offsets with begin > end, overlapping tensors, gaps, or bytes
	// after the last tensor.
	ErrBadOffsets = errors.New("models: bad safetensors data_offsets")
	// ErrSizeMismatch: a tensor's data_offsets length differs from shape × dtype size,
	// or that product overflows.
	ErrSizeMismatch = errors.New("models: safetensors tensor size does not match its shape")
)

// Header is a parsed safetensors header.
type Header struct {
	// Path is the file the header was read from (used in errors and Tensor.File).
	Path string
	// Len is the JSON header length N; the data section starts at DataStart = 8+N.
	Len       int64
	DataStart int64
	// Tensors in data order (ascending offsets). Offsets are absolute file offsets.
	Tensors []*Tensor
	// Metadata is "__metadata__", nil when absent.
	Metadata map[string]string
}

// ReadHeader reads and validates the header of a safetensors file of the given size
// through r. It reads only the 8-byte length and the JSON header, never tensor data.
func ReadHeader(r io.ReaderAt, size int64, path string) (*Header, error) {
	if size < 8 {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than the 8-byte header length", ErrTruncated, path, size)
	}
	var lenBuf [8]byte
	if err := readFull(r, lenBuf[:], 0, path); err != nil {
		return nil, err
	}
	n64 := binary.LittleEndian.Uint64(lenBuf[:])
	// Bound the untrusted length before allocating anything.
	if n64 > MaxHeaderSize {
		return nil, fmt.Errorf("%w: %s: header length %d exceeds %d", ErrHeaderTooLarge, path, n64, MaxHeaderSize)
	}
	n := int64(n64)
	if n > size-8 {
		return nil, fmt.Errorf("%w: %s: header length %d exceeds the %d bytes after the length field",
			ErrTruncated, path, n, size-8)
	}
	buf := make([]byte, n)
	if err := readFull(r, buf, 8, path); err != nil {
		return nil, err
	}
	h, err := parseHeader(buf, path)
	if err != nil {
		return nil, err
	}
	h.Len = n
	h.DataStart = 8 + n
	if err := h.layout(size - 8 - n); err != nil {
		return nil, err
	}
	return h, nil
}

// readFull reads len(p) bytes at off. io.ReaderAt may return io.EOF with a full read
// at the end of the input (bytes.Reader does, even for an empty p at the end); a short
// read means the file is shorter than the size we were given.
func readFull(r io.ReaderAt, p []byte, off int64, path string) error {
	if len(p) == 0 {
		return nil
	}
	n, err := r.ReadAt(p, off)
	switch {
	case n == len(p):
		return nil
	case err == io.EOF || err == nil:
		return fmt.Errorf("%w: %s: read %d of %d bytes at offset %d", ErrTruncated, path, n, len(p), off)
	default:
		return fmt.Errorf("models: %s: read at offset %d: %w", path, off, err)
	}
}

// parseHeader decodes the JSON header into tensors with offsets relative to the data
// section (fixed up by layout) and checks each entry on its own.
func parseHeader(buf []byte, path string) (*Header, error) {
	if !utf8.Valid(buf) {
		return nil, fmt.Errorf("%w: %s: header is not valid UTF-8", ErrInvalidHeader, path)
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidHeader, path, fmt.Sprintf(format, a...))
	}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, bad("header is not a JSON object: %v", err)
	}
	h := &Header{Path: path}
	seen := map[string]bool{}
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return nil, bad("%v", err)
		}
		if seen[key] {
			return nil, bad("duplicate key %q", key)
		}
		seen[key] = true
		if key == "__metadata__" {
			md, err := parseMetadata(dec)
			if err != nil {
				return nil, bad("__metadata__: %v", err)
			}
			h.Metadata = md
			continue
		}
		t, err := parseTensor(dec, key, path)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, bad("%v", err)
	}
	// Only whitespace (the reference writer pads with spaces) may follow the object.
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, bad("after the header object: %v", err)
		}
		return nil, bad("unexpected %v after the header object", tok)
	}
	return h, nil
}

// parseMetadata reads "__metadata__": an object of strings, or null (the reference's
// Option<HashMap<String, String>> accepts null as absent).
func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object: found %v", describe(tok))
	}
	md := map[string]string{}
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return nil, err
		}
		if _, dup := md[k]; dup {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("value of %q is %v, not a string", k, describe(tok))
		}
		md[k] = v
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	return md, nil
}

func parseTensor(dec *json.Decoder, name, path string) (*Tensor, error) {
	bad := func(sentinel error, format string, a ...any) error {
		return fmt.Errorf("%w: %s: tensor %q: %s", sentinel, path, name, fmt.Sprintf(format, a...))
	}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, bad(ErrInvalidHeader, "entry is not an object: %v", err)
	}
	var (
		dtype            string
		shape, offsets   []int64
		hasD, hasS, hasO bool
	)
	for dec.More() {
		key, err := stringToken(dec)
		if err != nil {
			return nil, bad(ErrInvalidHeader, "%v", err)
		}
		switch key {
		case "dtype":
			if hasD {
				return nil, bad(ErrInvalidHeader, "duplicate key %q", key)
			}
			hasD = true
			tok, err := dec.Token()
			if err != nil {
				return nil, bad(ErrInvalidHeader, "dtype: %v", err)
			}
			s, ok := tok.(string)
			if !ok {
				return nil, bad(ErrInvalidHeader, "dtype is %v, not a string", describe(tok))
			}
			dtype = s
		case "shape", "data_offsets":
			if (key == "shape" && hasS) || (key == "data_offsets" && hasO) {
				return nil, bad(ErrInvalidHeader, "duplicate key %q", key)
			}
			v, err := intArray(dec)
			if err != nil {
				return nil, bad(ErrInvalidHeader, "%s: %v", key, err)
			}
			if key == "shape" {
				shape, hasS = v, true
			} else {
				offsets, hasO = v, true
			}
		default:
			// The reference (serde derive without deny_unknown_fields) ignores unknown
			// fields; so do we, after skipping the value.
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad(ErrInvalidHeader, "%s: %v", key, err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, bad(ErrInvalidHeader, "%v", err)
	}
	switch {
	case !hasD:
		return nil, bad(ErrInvalidHeader, "no dtype")
	case !hasS:
		return nil, bad(ErrInvalidHeader, "no shape")
	case !hasO:
		return nil, bad(ErrInvalidHeader, "no data_offsets")
	}
	dt := DType(dtype)
	if dt.Size() == 0 {
		return nil, bad(ErrUnknownDType, "dtype %q", dtype)
	}
	if shape == nil {
		shape = []int64{} // a scalar: [] in JSON, never nil in a Tensor
	}
	nbytes := int64(dt.Size())
	elems := int64(1)
	for _, d := range shape {
		if d < 0 {
			return nil, bad(ErrInvalidHeader, "negative dimension in shape %v", shape)
		}
		var ok bool
		if elems, ok = mulInt64(elems, d); !ok {
			return nil, bad(ErrSizeMismatch, "shape %v: element count overflows", shape)
		}
	}
	nbytes, ok := mulInt64(elems, nbytes)
	if !ok {
		return nil, bad(ErrSizeMismatch, "shape %v × %s: byte size overflows", shape, dt)
	}
	if len(offsets) != 2 {
		return nil, bad(ErrInvalidHeader, "data_offsets %v: want [begin, end]", offsets)
	}
	begin, end := offsets[0], offsets[1]
	if begin < 0 || end < 0 || begin > end {
		return nil, bad(ErrBadOffsets, "data_offsets [%d, %d]: begin must be <= end, both >= 0", begin, end)
	}
	if end-begin != nbytes {
		return nil, bad(ErrSizeMismatch, "data_offsets [%d, %d] hold %d bytes, shape %v × %s needs %d",
			begin, end, end-begin, shape, dt, nbytes)
	}
	return &Tensor{Name: name, DType: dt, Shape: shape, File: path, Offset: begin, Size: nbytes}, nil
}

// layout checks that the tensors tile the data section (dataLen bytes) exactly and
// turns their offsets into absolute file offsets.
func (h *Header) layout(dataLen int64) error {
	ts := h.Tensors
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Offset != ts[j].Offset {
			return ts[i].Offset < ts[j].Offset
		}
		return ts[i].Size < ts[j].Size
	})
	var at int64
	for i, t := range ts {
		end := t.Offset + t.Size // no overflow: both were parsed as int64 offsets, end >= begin
		switch {
		case t.Offset < at:
			return fmt.Errorf("%w: %s: tensor %q data [%d, %d] overlaps tensor %q (ends at %d)",
				ErrBadOffsets, h.Path, t.Name, t.Offset, end, ts[i-1].Name, at)
		case t.Offset > at:
			return fmt.Errorf("%w: %s: tensor %q data starts at %d, leaving a gap after byte %d (tensors must be contiguous)",
				ErrBadOffsets, h.Path, t.Name, t.Offset, at)
		case end > dataLen:
			return fmt.Errorf("%w: %s: tensor %q data [%d, %d] runs past the end of the data section (%d bytes): file truncated or data_offsets out of range",
				ErrTruncated, h.Path, t.Name, t.Offset, end, dataLen)
		}
		at = end
	}
	if at != dataLen {
		return fmt.Errorf("%w: %s: tensors cover %d bytes but the data section has %d", ErrBadOffsets, h.Path, at, dataLen)
	}
	for _, t := range ts {
		t.Offset += h.DataStart
	}
	return nil
}

// WriteHeader writes the 8-byte length and the JSON header for tensors laid out
// contiguously in the given order, with metadata (may be nil) as "__metadata__". It
// sets each tensor's Offset (absolute) and Size to where its data must follow, and
// returns the number of bytes written (= the data section's start). The JSON is padded
// with spaces to a multiple of 8 bytes so the data section is 8-byte aligned, as the
// reference writer does (safetensors/src/tensor.rs, prepare).
func WriteHeader(w io.Writer, tensors []*Tensor, metadata map[string]string) (int64, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		sep()
		b.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	names := map[string]bool{}
	var off int64
	rel := make([]int64, len(tensors))
	for i, t := range tensors {
		if t.Name == "__metadata__" || names[t.Name] {
			return 0, fmt.Errorf("models: write header: duplicate or reserved tensor name %q", t.Name)
		}
		names[t.Name] = true
		if !utf8.ValidString(t.Name) {
			return 0, fmt.Errorf("models: write header: tensor name %q is not valid UTF-8", t.Name)
		}
		if t.DType.Size() == 0 {
			return 0, fmt.Errorf("%w: write header: tensor %q: dtype %q", ErrUnknownDType, t.Name, t.DType)
		}
		size := int64(t.DType.Size())
		for _, d := range t.Shape {
			var ok bool
			if d < 0 {
				return 0, fmt.Errorf("models: write header: tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
			if size, ok = mulInt64(size, d); !ok {
				return 0, fmt.Errorf("%w: write header: tensor %q: shape %v overflows", ErrSizeMismatch, t.Name, t.Shape)
			}
		}
		if off > math.MaxInt64-size {
			return 0, fmt.Errorf("%w: write header: data section overflows at tensor %q", ErrSizeMismatch, t.Name)
		}
		rel[i] = off
		sep()
		writeJSONString(&b, t.Name)
		b.WriteString(`:{"dtype":`)
		writeJSONString(&b, string(t.DType))
		b.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, off, off+size)
		off += size
		t.Size = size
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return 0, fmt.Errorf("%w: write header: %d bytes", ErrHeaderTooLarge, b.Len())
	}
	n := int64(b.Len())
	for i, t := range tensors {
		t.Offset = 8 + n + rel[i]
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(n))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return 0, fmt.Errorf("models: write header: %w", err)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return 8, fmt.Errorf("models: write header: %w", err)
	}
	return 8 + n, nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes; writes to a bytes.Buffer never fail
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

func mulInt64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("want %q, found %v", string(d), describe(tok))
	}
	return nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a key, found %v", describe(tok))
	}
	return s, nil
}

// intArray reads a JSON array of non-fractional integers that fit in int64.
func intArray(dec *json.Decoder) ([]int64, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, fmt.Errorf("not an array: %v", err)
	}
	out := []int64{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("element %v is not a number", describe(tok))
		}
		v, err := strconv.ParseInt(num.String(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("element %s is not an integer in range", num)
		}
		out = append(out, v)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, err
	}
	return out, nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return strconv.Quote(string(v))
	case string:
		return strconv.Quote(v)
	case json.Number:
		return v.String()
	default:
		s := fmt.Sprint(v)
		return strings.TrimSpace(s)
	}
}
