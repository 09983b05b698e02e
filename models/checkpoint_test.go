package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestBadCheckpoints builds each bad input the reader must refuse from a good fixture (copy +
// corrupt) and checks the error: its sentinel (or type) and the names it must mention.
func TestBadCheckpoints(t *testing.T) {
	const st = "model.safetensors"
	cases := []struct {
		name    string
		fixture string
		corrupt func(t *testing.T, dir string)
		want    error    // sentinel, nil when only the text is checked
		mention []string // substrings of the message; "$DIR" is the folder
	}{
		{"missing config.json", "llama-tiny", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ConfigFile))
		}, ErrNoConfig, []string{"$DIR", "config.json"}},
		{"invalid JSON in config.json", "llama-tiny", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"model_type": "llama",`), 0o644)
		}, ErrBadConfig, []string{"$DIR/config.json"}},
		{"config.json is an array", "llama-tiny", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`[1]`), 0o644)
		}, ErrBadConfig, []string{"config.json"}},
		{"config.json is null", "llama-tiny", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`null`), 0o644)
		}, ErrBadConfig, []string{"not a JSON object"}},
		{"no model_type", "llama-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { delete(m, "model_type") })
		}, ErrBadConfig, []string{"config.json", "model_type", "supported: ernie4_5, exaone4, flex_olmo, gemma, gemma2, gemma3_text, glm, glm4, granite, granitemoe, helium, hunyuan_v1_dense, levit, llama"}},
		{"unknown model_type", "llama-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["model_type"] = "gpt9" })
		}, nil, []string{`unsupported model_type "gpt9"`, "supported: ernie4_5, exaone4, flex_olmo, gemma, gemma2, gemma3_text, glm, glm4, granite, granitemoe, helium, hunyuan_v1_dense, levit, llama, ministral, mistral, mixtral, olmo2, olmo3, olmoe, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, seed_oss, smollm3",
			"config.json"}},
		{"truncated safetensors", "llama-tiny", func(t *testing.T, dir string) {
			p := filepath.Join(dir, st)
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-100)
		}, ErrTruncated, []string{st, "model.norm.weight", "past the end"}},
		{"safetensors cut inside the header", "llama-tiny", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, st), 100)
		}, ErrTruncated, []string{st, "header length"}},
		{"safetensors shorter than 8 bytes", "llama-tiny", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, st), 5)
		}, ErrTruncated, []string{st, "5 bytes"}},
		{"header length larger than the file", "llama-tiny", func(t *testing.T, dir string) {
			p := filepath.Join(dir, st)
			b, _ := os.ReadFile(p)
			binary.LittleEndian.PutUint64(b[:8], uint64(len(b)))
			os.WriteFile(p, b, 0o644)
		}, ErrTruncated, []string{st, "exceeds"}},
		{"header length above 100MB", "llama-tiny", func(t *testing.T, dir string) {
			p := filepath.Join(dir, st)
			b, _ := os.ReadFile(p)
			binary.LittleEndian.PutUint64(b[:8], 1<<40)
			os.WriteFile(p, b, 0o644)
		}, ErrHeaderTooLarge, []string{st}},
		{"overlapping data_offsets", "llama-tiny", func(t *testing.T, dir string) {
			// Two tensors of equal size swap... no: point one at the other's bytes.
			editHeader(t, filepath.Join(dir, st), func(h map[string]any) {
				a := entry(t, h, "model.layers.0.input_layernorm.weight")
				b := entry(t, h, "model.layers.0.post_attention_layernorm.weight")
				b["data_offsets"] = a["data_offsets"]
			})
		}, ErrBadOffsets, []string{st, "overlaps", "layernorm.weight"}},
		{"out-of-range data_offsets", "llama-tiny", func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, st), func(h map[string]any) {
				// The last tensor in data order grows past the end of the file.
				e := entry(t, h, "model.norm.weight")
				offs := e["data_offsets"].([]any)
				begin, _ := offs[0].(json.Number).Int64()
				e["shape"] = []any{1 << 20}
				e["data_offsets"] = []any{begin, begin + 4<<20}
			})
		}, ErrTruncated, []string{st, `"model.norm.weight"`, "past the end"}},
		{"begin after end", "llama-tiny", func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, st), func(h map[string]any) {
				entry(t, h, "model.norm.weight")["data_offsets"] = []any{10, 2}
			})
		}, ErrBadOffsets, []string{st, `"model.norm.weight"`}},
		{"unknown dtype", "llama-tiny", func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, st), func(h map[string]any) {
				entry(t, h, "model.norm.weight")["dtype"] = "F12"
			})
		}, ErrUnknownDType, []string{st, `"model.norm.weight"`, `"F12"`}},
		{"shape/offset size mismatch", "llama-tiny", func(t *testing.T, dir string) {
			editHeader(t, filepath.Join(dir, st), func(h map[string]any) {
				entry(t, h, "model.norm.weight")["shape"] = []any{63}
			})
		}, ErrSizeMismatch, []string{st, `"model.norm.weight"`, "[63]"}},
		{"shard named in the index is missing", "llama-sharded", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00003-of-00004.safetensors"))
		}, ErrMissingShard, []string{"model-00003-of-00004.safetensors", IndexFile}},
		{"index names a shard outside the folder", "llama-sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, IndexFile), func(m map[string]any) {
				m["weight_map"].(map[string]any)["model.norm.weight"] = "../model.safetensors"
			})
		}, ErrBadIndex, []string{"../model.safetensors", "leaves"}},
		{"index without weight_map", "llama-sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, IndexFile), func(m map[string]any) { delete(m, "weight_map") })
		}, ErrBadIndex, []string{IndexFile, "weight_map"}},
		{"index is not JSON", "llama-sharded", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte("{"), 0o644)
		}, ErrBadIndex, []string{IndexFile}},
		{"index places a tensor in the wrong shard", "llama-sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, IndexFile), func(m map[string]any) {
				wm := m["weight_map"].(map[string]any)
				for name, shard := range wm {
					if shard == "model-00001-of-00004.safetensors" {
						wm[name] = "model-00002-of-00004.safetensors"
						return
					}
				}
			})
		}, ErrBadIndex, []string{"model-00001-of-00004.safetensors", "index says model-00002-of-00004.safetensors"}},
		{"shard holds a tensor the index lacks", "llama-sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, IndexFile), func(m map[string]any) {
				delete(m["weight_map"].(map[string]any), "model.norm.weight")
			})
		}, ErrBadIndex, []string{`"model.norm.weight"`, "not in the index"}},
		{"index names a tensor its shard lacks", "llama-sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, IndexFile), func(m map[string]any) {
				wm := m["weight_map"].(map[string]any)
				wm["model.extra.weight"] = wm["model.norm.weight"]
			})
		}, ErrBadIndex, []string{`"model.extra.weight"`, "does not hold it"}},
		{"tensor missing from every shard", "llama-sharded", func(t *testing.T, dir string) {
			// Drop the tensor from its shard's header and from the index, consistently.
			idx := filepath.Join(dir, IndexFile)
			var shard string
			editJSON(t, idx, func(m map[string]any) {
				wm := m["weight_map"].(map[string]any)
				shard = wm["model.layers.1.mlp.up_proj.weight"].(string)
				delete(wm, "model.layers.1.mlp.up_proj.weight")
			})
			dropTensor(t, filepath.Join(dir, shard), "model.layers.1.mlp.up_proj.weight")
		}, ErrMissingTensor, []string{`"model.layers.1.mlp.up_proj.weight"`, "no shard",
			"model-00001-of-00004.safetensors, model-00002-of-00004.safetensors", "layer model.layers.1.mlp"}},
		{"no safetensors files", "llama-tiny", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, st))
		}, ErrNoWeights, []string{"$DIR", "*.safetensors"}},
		{"tensor in two files", "llama-tiny", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, st))
			os.WriteFile(filepath.Join(dir, "copy.safetensors"), b, 0o644)
		}, ErrDuplicateTensor, []string{"copy.safetensors", st}},
		{"tensor no layer owns", "llama-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["num_hidden_layers"] = 1 })
		}, ErrUnusedTensor, []string{`"model.layers.1.`, "belongs to no llama layer"}},
		{"unsupported head class", "llama-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) {
				m["architectures"] = []any{"LlamaForSequenceClassification"}
			})
		}, ErrUnsupportedHead, []string{"LlamaForSequenceClassification", "LlamaForCausalLM"}},
		{"kv heads do not divide heads", "llama-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["num_key_value_heads"] = 3 })
		}, ErrBadConfig, []string{"num_attention_heads 4", "num_key_value_heads 3"}},
		{"zero hidden size", "qwen2-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["hidden_size"] = 0 })
		}, ErrBadConfig, []string{"hidden_size is 0"}},
		{"config field of the wrong type", "mistral-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) { m["hidden_size"] = "64" })
		}, ErrBadConfig, []string{"config.json", "hidden_size"}},
		{"levit subsample past the last stage", "levit-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) {
				m["down_ops"] = []any{[]any{""}, []any{""}, []any{"Subsample", 16, 2, 4, 2, 2}}
			})
		}, ErrBadConfig, []string{"stage 2", "hidden_sizes[3]"}},
		{"levit down_ops entry too short", "levit-tiny", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, ConfigFile), func(m map[string]any) {
				m["down_ops"] = []any{[]any{"Subsample", 16}}
			})
		}, ErrBadConfig, []string{"down_ops[0]"}},
		{"levit missing batch-norm statistic", "levit-tiny", func(t *testing.T, dir string) {
			dropTensor(t, filepath.Join(dir, st), "levit.encoder.stages.1.layers.2.queries.batch_norm.running_var")
		}, ErrMissingTensor, []string{`"levit.encoder.stages.1.layers.2.queries.batch_norm.running_var"`,
			"layer levit.encoder.stages.1.layers.2.queries"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyFixture(t, c.fixture)
			c.corrupt(t, dir)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("loaded without error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.HasPrefix(msg, "models: ") || msg != strings.ToLower(msg[:1])+msg[1:] {
				t.Errorf("error %q: want lowercase, models:-prefixed", msg)
			}
			for _, m := range c.mention {
				m = strings.ReplaceAll(m, "$DIR", dir)
				if !strings.Contains(msg, m) {
					t.Errorf("error %q does not mention %q", msg, m)
				}
			}
		})
	}
}

// dropTensor removes a tensor from a file, rewriting header and data so the file stays
// valid (uses WriteHeader and OpenTensor).
func dropTensor(t *testing.T, path, name string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	h, err := ReadHeader(f, fi.Size(), path)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var keep []*Tensor
	var data bytes.Buffer
	found := false
	for _, tt := range h.Tensors {
		if tt.Name == name {
			found = true
			continue
		}
		r, c, err := OpenTensor(tt)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(&data, r)
		c.Close()
		cp := *tt
		keep = append(keep, &cp)
	}
	if !found {
		t.Fatalf("%s has no tensor %q", path, name)
	}
	var out bytes.Buffer
	if _, err := WriteHeader(&out, keep, h.Metadata); err != nil {
		t.Fatal(err)
	}
	out.Write(data.Bytes())
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWrongShape: a tensor whose shape disagrees with the config gives a *ShapeError
// naming the tensor, the shape the config implies and the one found.
func TestWrongShape(t *testing.T) {
	cases := []struct {
		name, fixture string
		edit          func(m map[string]any)
		tensor        string
		want, got     []int64
		because       string
	}{
		{"llama intermediate_size", "llama-tiny", func(m map[string]any) { m["intermediate_size"] = 128 },
			"model.layers.0.mlp.gate_proj.weight", []int64{128, 64}, []int64{160, 64}, "intermediate_size=128"},
		{"llama null num_key_value_heads means num_attention_heads", "llama-tiny", func(m map[string]any) { m["num_key_value_heads"] = nil },
			"model.layers.0.self_attn.k_proj.weight", []int64{64, 64}, []int64{32, 64}, "num_key_value_heads=4"},
		{"llama missing head_dim means hidden/heads", "qwen3-tiny", func(m map[string]any) {
			m["model_type"] = "llama"
			m["architectures"] = []any{"LlamaForCausalLM"}
			delete(m, "head_dim")
		}, "model.layers.0.self_attn.q_proj.weight", []int64{64, 64}, []int64{128, 64}, "head_dim=16"},
		{"qwen3 missing head_dim defaults to 128", "qwen3-tiny", func(m map[string]any) { delete(m, "head_dim") },
			"model.layers.0.self_attn.q_proj.weight", []int64{512, 64}, []int64{128, 64}, "head_dim=128"},
		{"vocab", "mistral-tiny", func(m map[string]any) { m["vocab_size"] = 500 },
			"model.embed_tokens.weight", []int64{500, 64}, []int64{512, 64}, "vocab_size=500"},
		{"tied head needs the embedding", "llama-odd", func(m map[string]any) { m["hidden_size"] = 150 },
			"model.embed_tokens.weight", []int64{512, 150}, []int64{512, 160}, "hidden_size=150"},
		{"levit hidden size", "levit-tiny", func(m map[string]any) { m["hidden_sizes"] = []any{40, 48, 64} },
			"levit.patch_embeddings.embedding_layer_1.convolution.weight", []int64{5, 3, 3, 3}, []int64{4, 3, 3, 3}, "hidden_sizes[0]=40"},
		{"levit labels", "levit-tiny", func(m map[string]any) {
			m["id2label"] = map[string]any{"0": "a", "1": "b", "2": "c"}
		}, "classifier.linear.weight", []int64{3, 64}, []int64{10, 64}, "num_labels=3"},
		{"levit image size changes attention_biases", "levit-tiny", func(m map[string]any) { m["image_size"] = 80 },
			"levit.encoder.stages.0.layers.0.module.attention_biases", []int64{2, 25}, []int64{2, 16}, "resolution=5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyFixture(t, c.fixture)
			editJSON(t, filepath.Join(dir, ConfigFile), c.edit)
			_, err := Load(dir)
			var se *ShapeError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want a *ShapeError", err)
			}
			if se.Tensor != c.tensor || !reflect.DeepEqual(se.Want, c.want) || !reflect.DeepEqual(se.Got, c.got) ||
				!strings.Contains(se.Because, c.because) {
				t.Errorf("got %+v, want tensor %s want %v got %v because %q", se, c.tensor, c.want, c.got, c.because)
			}
			msg := err.Error()
			for _, s := range []string{c.tensor, shapeStr(c.want...), shapeStr(c.got...)} {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
		})
	}
}

func TestNeedAndOpenTensor(t *testing.T) {
	ck, err := Open(filepath.Join(fixtures, "llama-sharded"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.Files) != 4 || ck.ModelType != "llama" || ck.Config["hidden_size"] != float64(64) {
		t.Fatalf("files %v model_type %q", ck.Files, ck.ModelType)
	}
	_, err = ck.Need("nope.weight", []int64{1}, "")
	if !errors.Is(err, ErrMissingTensor) || !strings.Contains(err.Error(), `"nope.weight"`) ||
		!strings.Contains(err.Error(), "model-00004-of-00004.safetensors") {
		t.Errorf("missing tensor: %v", err)
	}
	tn, err := ck.Need("model.norm.weight", []int64{64}, "")
	if err != nil {
		t.Fatal(err)
	}
	// OpenTensor returns exactly the tensor's bytes: compare with a direct read of the
	// file at the absolute offset ReadHeader computed from the header length.
	r, c, err := OpenTensor(tn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(r)
	if err != nil || int64(len(got)) != tn.Size || tn.Size != 256 {
		t.Fatalf("read %d bytes (%v), size %d", len(got), err, tn.Size)
	}
	raw, _ := os.ReadFile(tn.File)
	n := int64(binary.LittleEndian.Uint64(raw[:8]))
	if tn.Offset < 8+n || !bytes.Equal(got, raw[tn.Offset:tn.Offset+tn.Size]) {
		t.Errorf("section differs from the file at offset %d", tn.Offset)
	}

	gone := *tn
	gone.File = filepath.Join(t.TempDir(), "gone.safetensors")
	if _, _, err := OpenTensor(&gone); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	past := *tn
	past.Offset = int64(len(raw)) - 10
	if _, _, err := OpenTensor(&past); !errors.Is(err, ErrTruncated) {
		t.Errorf("extent past the end: %v", err)
	}
}

// TestAddView: a view reads exactly its part of the stacked tensor's bytes; a part outside
// it, a missing parent or a name taken by another tensor is refused; the same view again is
// accepted (a second build of one checkpoint).
func TestAddView(t *testing.T) {
	ck, err := Open(filepath.Join(fixtures, "granitemoe-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	const in = "model.layers.0.block_sparse_moe.input_linear.weight" // [5, 80, 96] bf16
	p := ck.Tensors[in]
	if err := ck.AddView("up3", in, (3*80+40)*96, []int64{40, 96}); err != nil {
		t.Fatal(err)
	}
	v := ck.Tensors["up3"]
	r, c, err := OpenTensor(v)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, _ := io.ReadAll(r)
	raw, _ := os.ReadFile(p.File)
	at := p.Offset + (3*80+40)*96*2
	if v.Of != in || v.Size != 40*96*2 || !bytes.Equal(got, raw[at:at+v.Size]) {
		t.Errorf("view %+v reads other bytes than expert 3's up rows", v)
	}
	if err := ck.AddView("up3", in, (3*80+40)*96, []int64{40, 96}); err != nil {
		t.Errorf("the same view again: %v", err)
	}
	for _, c := range []struct {
		name, of string
		elem     int64
		want     string
	}{
		{"up3", in, 0, "already has a tensor of that name"},
		{"past", in, 4*80*96 + 41*96, "outside its 38400"},
		{"neg", in, -1, "outside"},
		{"x", "model.layers.0.nope.weight", 0, "in no shard"},
	} {
		if err := ck.AddView(c.name, c.of, c.elem, []int64{40, 96}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddView(%s at %d): %v, want %q", c.name, c.elem, err, c.want)
		}
	}
}

// TestSyntheticCheckpoint builds a checkpoint from nothing with WriteHeader: a qwen3
// with attention_bias, a bare Qwen3Model (no "model." prefix, no lm_head) and an old
// rotary buffer that no module owns.
func TestSyntheticCheckpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"model_type":"qwen3","architectures":["Qwen3Model"],"vocab_size":10,"hidden_size":8,
		"intermediate_size":12,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,
		"head_dim":4,"attention_bias":true,"rms_norm_eps":1e-5}`
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(cfg), 0o644)
	shapes := map[string][]int64{
		"embed_tokens.weight": {10, 8}, "norm.weight": {8},
		"layers.0.input_layernorm.weight": {8}, "layers.0.post_attention_layernorm.weight": {8},
		"layers.0.self_attn.q_proj.weight": {8, 8}, "layers.0.self_attn.q_proj.bias": {8},
		"layers.0.self_attn.k_proj.weight": {4, 8}, "layers.0.self_attn.k_proj.bias": {4},
		"layers.0.self_attn.v_proj.weight": {4, 8}, "layers.0.self_attn.v_proj.bias": {4},
		"layers.0.self_attn.o_proj.weight": {8, 8}, "layers.0.self_attn.o_proj.bias": {8},
		"layers.0.self_attn.q_norm.weight": {4}, "layers.0.self_attn.k_norm.weight": {4},
		"layers.0.mlp.gate_proj.weight": {12, 8}, "layers.0.mlp.up_proj.weight": {12, 8},
		"layers.0.mlp.down_proj.weight": {8, 12}, "layers.0.self_attn.rotary_emb.inv_freq": {2},
	}
	var ts []*Tensor
	for _, name := range keys(shapes) {
		ts = append(ts, &Tensor{Name: name, DType: BF16, Shape: shapes[name]})
	}
	var buf bytes.Buffer
	if _, err := WriteHeader(&buf, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, tt := range ts {
		total += tt.Size
	}
	buf.Write(make([]byte, total))
	os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644)

	g, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Layers) != 6 || g.Layers[0].Module != "embed_tokens" || g.Layers[5].Module != "norm" {
		var mods []string
		for _, l := range g.Layers {
			mods = append(mods, l.Module)
		}
		t.Fatalf("layers %v", mods)
	}
	a := g.Layers[2]
	if a.Module != "layers.0.self_attn" || !a.Bias || a.Tensors["o_proj.bias"] != "layers.0.self_attn.o_proj.bias" || a.Eps != 1e-5 {
		t.Errorf("attention %+v", a)
	}
	if md := g.Checkpoint.Metadata[filepath.Join(dir, "model.safetensors")]; md["format"] != "pt" {
		t.Errorf("metadata %v", g.Checkpoint.Metadata)
	}
}

func TestSupported(t *testing.T) {
	want := []string{"ernie4_5", "exaone4", "flex_olmo", "gemma", "gemma2", "gemma3_text", "glm", "glm4", "granite", "granitemoe", "helium", "hunyuan_v1_dense", "levit", "llama", "ministral", "mistral", "mixtral", "olmo2", "olmo3", "olmoe", "phi3", "qwen2", "qwen2_moe", "qwen3",
		"qwen3_moe", "seed_oss", "smollm3"}
	if got := Supported(); !reflect.DeepEqual(got, want) {
		t.Errorf("Supported() = %v, want %v", got, want)
	}
}

// A folder whose name holds glob metacharacters still finds its safetensors files.
func TestFolderNameWithGlobCharacters(t *testing.T) {
	src := copyFixture(t, "llama-tiny")
	dst := filepath.Join(filepath.Dir(src), "odd[name]*")
	if err := os.Rename(src, dst); err != nil {
		t.Fatal(err)
	}
	g, err := Load(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Layers) != 11 || len(g.Checkpoint.Files) != 1 {
		t.Errorf("%d layers, files %v", len(g.Layers), g.Checkpoint.Files)
	}
}

// shapeStr formats a shape as fmt prints []int64: [2 3].
func shapeStr(s ...int64) string {
	b := []byte{'['}
	for i, d := range s {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}
