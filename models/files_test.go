package models

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSpecialFilesRefused: a named pipe where a config, index or shard should be is
// refused by name, at once; opening it first would block until a writer came.
func TestSpecialFilesRefused(t *testing.T) {
	src := "../testdata/fixtures/llama-tiny"
	for _, name := range []string{"config.json", "model.safetensors", "extra.safetensors", IndexFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"config.json", "model.safetensors"} {
				if f == name {
					continue
				}
				b, err := os.ReadFile(filepath.Join(src, f))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(dir, f), b, 0o644)
			}
			if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := Open(dir); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), name+" is a named pipe (FIFO)") {
					t.Fatalf("error %v, want one naming %s as a named pipe", err, name)
				}
				if strings.Count(err.Error(), "models:") != 1 {
					t.Errorf("error %q repeats its prefix", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Open blocked on a named pipe")
			}
		})
	}
	if _, _, err := OpenRegular("/dev/null"); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a device") {
		t.Errorf("/dev/null: %v", err)
	}
	if _, _, err := OpenRegular(src); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a folder") {
		t.Errorf("a folder: %v", err)
	}
}

// TestConfigJSONErrors: messages speak of JSON types and fields, never of Go types.
func TestConfigJSONErrors(t *testing.T) {
	src := "../testdata/fixtures/llama-tiny"
	for _, c := range []struct{ config, want string }{
		{`[1,2]`, "config.json: expected a JSON object, got an array"},
		{`"llama"`, "config.json: expected a JSON object, got a string"},
		{`{"model_type": "llama", "hidden_size": "big"}`, `"hidden_size": expected an integer, got a string`},
		{`{"model_type": "llama", "hidden_size": 64.5}`, `"hidden_size": expected an integer, got the number 64.5`},
		{`{"model_type": "llama", "num_key_value_heads": [2]}`, `expected an integer, got an array`},
		{`{"model_type": "llama",`, "config.json: not valid JSON"},
	} {
		dir := t.TempDir()
		b, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
		os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o644)
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.config, err, c.want)
			continue
		}
		for _, gotype := range []string{"interface", "map[", "int64", "float64", "Go ", "struct"} {
			if strings.Contains(err.Error(), gotype) {
				t.Errorf("%s: error %q shows a Go type (%s)", c.config, err, gotype)
			}
		}
	}
}
