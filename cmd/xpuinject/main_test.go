package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/xpuinject/xpuinject/models"
)

// The eval tests run the CLI with --python pointing at testdata/fakepython, built next
// to the CLI: it answers the probe and, as the eval driver, records its pid, sleeps and
// writes a fixed eval.json, so that an eval can be interrupted or observed without torch.
const (
	fakePythonPIDs  = "XPUINJECT_FAKE_PYTHON_PIDS"  // file the driver appends its pid to
	fakePythonSleep = "XPUINJECT_FAKE_PYTHON_SLEEP" // how long the driver runs (a Go duration)
)

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) != "" {
		os.Exit(runAsCLI())
	}
	code := m.Run()
	if cliDir != "" {
		os.RemoveAll(cliDir)
	}
	os.Exit(code)
}

var (
	cliOnce sync.Once
	cliDir  string
	cliErr  error
)

// buildOnce builds xpuinject and the fake Python once per test run, without the race
// detector whatever this test binary was built with (the kill tests need them fast).
func buildOnce(t *testing.T) {
	t.Helper()
	cliOnce.Do(func() {
		if cliDir, cliErr = os.MkdirTemp("", "xpuinject-cli-"); cliErr != nil {
			return
		}
		for _, b := range [][2]string{{"xpuinject", "."}, {"python", "./testdata/fakepython"}} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(cliDir, b[0]), b[1]).CombinedOutput()
			if err != nil {
				cliErr = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
}

// cliBinary is the built xpuinject.
func cliBinary(t *testing.T) string {
	t.Helper()
	buildOnce(t)
	return filepath.Join(cliDir, "xpuinject")
}

// fakePythonExe is the built fake interpreter, to pass as --python.
func fakePythonExe(t *testing.T) string {
	t.Helper()
	buildOnce(t)
	return filepath.Join(cliDir, "python")
}

// treeState describes every entry under root (type, mode, content hash or link
// target), relative to root, so two trees compare equal only when byte-identical.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "link " + target
		case fi.IsDir():
			m[rel] = "dir " + fi.Mode().Perm().String()
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			m[rel] = "file " + fi.Mode().Perm().String() + " " + hex.EncodeToString(sum[:])
		default:
			m[rel] = "special " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// diffTrees lists what differs between two tree states ("" when none).
func diffTrees(before, after map[string]string) string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		} else if w != v {
			d = append(d, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "added "+k)
		}
	}
	slices.Sort(d)
	return strings.Join(d, "\n")
}

// synthLlama writes a llama checkpoint of real size (tens of MB) with pseudo-random
// weights, so that a pack takes long enough for a kill to land in the middle of it.
func synthLlama(t *testing.T, dir string, hidden, inter, layers, vocab, heads, kvHeads int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	headDim := hidden / heads
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": hidden,
		"intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
		"num_key_value_heads": kvHeads, "head_dim": headDim, "vocab_size": vocab, "rms_norm_eps": 1e-6,
		"max_position_embeddings": 512, "tie_word_embeddings": false, "hidden_act": "silu",
		"attention_bias": false, "mlp_bias": false, "dtype": "float32",
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var ts []*models.Tensor
	add := func(name string, shape ...int64) {
		ts = append(ts, &models.Tensor{Name: name, DType: models.F32, Shape: shape})
	}
	add("model.embed_tokens.weight", vocab, hidden)
	add("lm_head.weight", vocab, hidden)
	add("model.norm.weight", hidden)
	for l := int64(0); l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
		add(p+"self_attn.q_proj.weight", heads*headDim, hidden)
		add(p+"self_attn.k_proj.weight", kvHeads*headDim, hidden)
		add(p+"self_attn.v_proj.weight", kvHeads*headDim, hidden)
		add(p+"self_attn.o_proj.weight", hidden, heads*headDim)
		add(p+"mlp.gate_proj.weight", inter, hidden)
		add(p+"mlp.up_proj.weight", inter, hidden)
		add(p+"mlp.down_proj.weight", hidden, inter)
	}
	fh, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(fh, 1<<20)
	if _, err := models.WriteHeader(w, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	x := uint32(2463534242)
	var buf [4]byte
	for _, tt := range ts {
		n := int64(1)
		for _, s := range tt.Shape {
			n *= s
		}
		for i := int64(0); i < n; i++ {
			x ^= x << 13 // xorshift32: finite values of magnitude about 2^-8 to 2^-1
			x ^= x >> 17
			x ^= x << 5
			binary.LittleEndian.PutUint32(buf[:], x&0x807fffff|(119+x>>29)<<23)
			w.Write(buf[:])
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}
