package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"syscall"
)

// ErrNotRegular: a file xpuinject reads is a named pipe, a device, a socket or a folder.
var ErrNotRegular = errors.New("models: not a regular file")

// OpenRegular opens path for reading when it is a regular file (symlinks followed). The
// type is checked before opening, because opening a named pipe blocks until some writer
// appears, and again on the open descriptor; O_NONBLOCK makes the open of a pipe swapped
// in between the two return at once instead of hanging.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(path, st.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(path, st.Mode())
	}
	return f, st, nil
}

func notRegular(path string, m fs.FileMode) error {
	what := "not a regular file"
	switch {
	case m.IsDir():
		what = "a folder"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a device"
	}
	return &notRegularError{fmt.Sprintf("models: %s is %s, not a regular file", path, what)}
}

type notRegularError struct{ msg string }

func (e *notRegularError) Error() string        { return e.msg }
func (e *notRegularError) Is(target error) bool { return target == ErrNotRegular }

// JSONError says what is wrong with a JSON file in words a user knows: a type mismatch
// names the JSON types and the field, never the Go types it was decoded into.
func JSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		msg := fmt.Sprintf("expected %s, got %s", jsonWant(te.Type), jsonGot(te.Value))
		if te.Field != "" {
			msg = fmt.Sprintf("%q: %s", te.Field, msg)
		}
		return msg
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not valid JSON (at byte %d): %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonWant(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a value of another type"
}

func jsonGot(v string) string {
	switch v {
	case "array":
		return "an array"
	case "object":
		return "an object"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "number":
		return "a number"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return "the number " + n
	}
	return v
}

// HumanBytes formats a byte count in SI units with one decimal ("1.5 GB"), as
// huggingface_hub's progress bars and --max-shard-size do: every size xpuinject prints
// goes through it, so the CLI, the report and the cards agree.
func HumanBytes(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "kB", "MB", "GB", "TB"} {
		if f < 1000 || u == "TB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1000
	}
	return ""
}
