package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
)

// The packed checkpoints the pre-flight must refuse, written once for Go and Python
// (testdata/packed-contract.json): one per property of contract.json's packed_checks.
// tests/kernels/test_packed_contract.py makes the same edits and expects inject() to
// refuse each before it changes the model.

type packedContract struct {
	Model  string `json:"model"`
	Tensor string `json:"tensor"`
	Cases  []struct {
		Check  string `json:"check"`
		Edit   string `json:"edit"`
		Go     string `json:"go"`
		Python string `json:"python"`
	} `json:"cases"`
}

func readPackedContract(t *testing.T) packedContract {
	t.Helper()
	b, err := os.ReadFile("../../testdata/packed-contract.json")
	if err != nil {
		t.Fatal(err)
	}
	var pc packedContract
	if err := json.Unmarshal(b, &pc); err != nil {
		t.Fatal(err)
	}
	return pc
}

// TestPackedContractCoversEveryCheck: a property added to contract.json needs its case.
func TestPackedContractCoversEveryCheck(t *testing.T) {
	pc := readPackedContract(t)
	var checks, cases []string
	for _, c := range kernels.TheContract().PackedChecks {
		checks = append(checks, c.Name)
	}
	for _, c := range pc.Cases {
		cases = append(cases, c.Check)
	}
	if !slices.Equal(checks, cases) {
		t.Errorf("contract.json packed_checks %v, testdata/packed-contract.json cases %v", checks, cases)
	}
}

// breakPacked applies the edit of check to the packed checkpoint in dir.
func breakPacked(t *testing.T, dir, check, tensor string) {
	t.Helper()
	shard := filepath.Join(dir, "model.safetensors")
	switch check {
	case "plan_digest":
		f, err := os.OpenFile(filepath.Join(dir, "plan.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("# edited by hand\n")
		f.Close()
	case "shard_digest", "present", "shape":
		header, data := readSafetensors(t, shard)
		switch check {
		case "shard_digest":
			header["__metadata__"].(map[string]any)["xpuinject_plan_sha256"] = strings.Repeat("0", 64)
		case "present":
			header[tensor[:len(tensor)-1]+"x"] = header[tensor]
			delete(header, tensor)
		case "shape":
			info := header[tensor].(map[string]any)
			shape := info["shape"].([]any)
			slices.Reverse(shape)
		}
		writeSafetensors(t, shard, header, data)
	case "dtype":
		header, data := readSafetensors(t, shard)
		// Every tensor's bytes in file order, the one edited widened from bf16 to f32.
		type span struct {
			name       string
			start, end int64
		}
		var spans []span
		for name, v := range header {
			if name == "__metadata__" {
				continue
			}
			off := v.(map[string]any)["data_offsets"].([]any)
			spans = append(spans, span{name, int64(off[0].(float64)), int64(off[1].(float64))})
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
		var out bytes.Buffer
		for _, s := range spans {
			b := data[s.start:s.end]
			info := header[s.name].(map[string]any)
			if s.name == tensor {
				if info["dtype"] != "BF16" {
					t.Fatalf("%s is %v, want BF16 to widen", tensor, info["dtype"])
				}
				wide := make([]byte, 2*len(b))
				for i := 0; i < len(b); i += 2 {
					binary.LittleEndian.PutUint32(wide[2*i:], uint32(binary.LittleEndian.Uint16(b[i:]))<<16)
				}
				b, info["dtype"] = wide, "F32"
			}
			info["data_offsets"] = []int64{int64(out.Len()), int64(out.Len() + len(b))}
			out.Write(b)
		}
		writeSafetensors(t, shard, header, out.Bytes())
	default:
		t.Fatalf("no edit for packed check %q", check)
	}
}

func readSafetensors(t *testing.T, path string) (map[string]any, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var header map[string]any
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	return header, b[8+n:]
}

func writeSafetensors(t *testing.T, path string, header map[string]any, data []byte) {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, uint64(len(h)))
	out.Write(h)
	out.Write(data)
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// packedContractCases are the fault-matrix cases of testdata/packed-contract.json: the
// eval's pre-flight refuses each before any Python is looked for.
func packedContractCases(t *testing.T) []faultCase {
	pc := readPackedContract(t)
	var cs []faultCase
	for _, c := range pc.Cases {
		cs = append(cs, faultCase{name: fmt.Sprintf("packed checkpoint breaks %s: %s", c.Check, c.Edit), code: exitError1,
			want: []string{c.Go},
			setup: func(t *testing.T, root string) []string {
				m, pkg, packed := prepared(t, root)
				breakPacked(t, packed, c.Check, pc.Tensor)
				return evalArgs(m, pkg, packed, filepath.Join(root, "eval"))
			}})
	}
	return cs
}
