package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeFolderUntilStdinCloses(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644)
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "w.safetensors"), []byte("weights"), 0o644)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run([]string{"--repo", "org/m=" + dir}, inR, outW) }()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://127.0.0.1:") {
		t.Fatalf("first line %q %v", line, err)
	}
	resp, err := http.Get(strings.TrimSpace(line) + "/api/models/org/m/revision/main?blobs=true")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		SHA      string
		Siblings []struct {
			RFilename string
			LFS       *struct{ Size int }
		}
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if len(info.SHA) != 40 || len(info.Siblings) != 2 || info.Siblings[1].RFilename != "sub/w.safetensors" || info.Siblings[1].LFS == nil || info.Siblings[0].LFS != nil {
		t.Errorf("revision info %+v", info)
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not exit when stdin closed")
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{{}, {"--repo", "nofolder"}, {"--repo", "org/m=/does/not/exist"}} {
		if err := run(args, strings.NewReader(""), io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
