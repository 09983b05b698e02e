package harness

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/models"
)

func TestMeasureFootprintOfAFixture(t *testing.T) {
	ck, err := models.Open("../testdata/fixtures/llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	fp := MeasureFootprint(ck)
	// llama-tiny: vocab 512, hidden 64, intermediate 160, 4 heads and 2 kv heads of 16, 2 layers
	layer := 2 * int64(64*64+2*32*64+64*64+3*160*64+2*64)
	embed, last := 2*int64(512*64), 2*int64(64+512*64) // embeddings; final norm and head
	want := Footprint{Weights: 2*layer + embed + last, Layers: 2, Layer: layer, First: embed, Last: last,
		OracleFloor: 2 * (embed + last + layer)}
	if fp != want {
		t.Fatalf("footprint %+v, want %+v", fp, want)
	}
	// one device holds everything; two stages of one layer each, the first with the oracle
	if got := fp.PerDevice(1); got != 2*fp.Weights+fp.OracleFloor {
		t.Errorf("PerDevice(1) = %d", got)
	}
	if got, w := fp.PerDevice(2), max(2*(layer+embed)+fp.OracleFloor, 2*(layer+last)); got != w {
		t.Errorf("PerDevice(2) = %d, want %d", got, w)
	}
	// tied embeddings (no head tensor): the last stage keeps the embeddings too
	odd, err := models.Open("../testdata/fixtures/llama-odd")
	if err != nil {
		t.Fatal(err)
	}
	if fo := MeasureFootprint(odd); fo.Last <= fo.First || fo.Last != fo.First+2*160 {
		t.Errorf("tied: first %d, last %d; want the last stage to hold the embeddings and the final norm", fo.First, fo.Last)
	}
}

// llama70b is a checkpoint index shaped like Llama-3.1-70B (bf16): only names and shapes.
func llama70b() *models.Checkpoint {
	ck := &models.Checkpoint{Tensors: map[string]*models.Tensor{}}
	add := func(name string, shape ...int64) {
		ck.Tensors[name] = &models.Tensor{Name: name, DType: models.BF16, Shape: shape}
	}
	const h, inter, kv, vocab = 8192, 28672, 1024, 128256
	add("model.embed_tokens.weight", vocab, h)
	add("model.norm.weight", h)
	add("lm_head.weight", vocab, h)
	for i := range 80 {
		p := "model.layers." + strconv.Itoa(i) + "."
		add(p+"self_attn.q_proj.weight", h, h)
		add(p+"self_attn.k_proj.weight", kv, h)
		add(p+"self_attn.v_proj.weight", kv, h)
		add(p+"self_attn.o_proj.weight", h, h)
		add(p+"mlp.gate_proj.weight", inter, h)
		add(p+"mlp.up_proj.weight", inter, h)
		add(p+"mlp.down_proj.weight", h, inter)
		add(p+"input_layernorm.weight", h)
		add(p+"post_attention_layernorm.weight", h)
	}
	return ck
}

func TestStagesNeeded(t *testing.T) {
	h200 := int64(150_000_000_000) // what torch reports for an H200, rounded
	fp := MeasureFootprint(llama70b())
	if fp.Layers != 80 || fp.Weights < 140e9 || fp.Weights > 142e9 {
		t.Fatalf("70B footprint %+v", fp)
	}
	// 80 layers over 3 stages: 26, 26 and the remainder's 28 on the last
	if got, w := fp.PerDevice(3), max(2*(26*fp.Layer+fp.First)+fp.OracleFloor, 2*(28*fp.Layer+fp.Last)); got != w {
		t.Errorf("PerDevice(3) = %d, want %d", got, w)
	}
	// two bf16 copies (282 GB) do not fit two H200s with the headroom; three do
	if n, err := StagesNeeded(fp, slices.Repeat([]int64{h200}, 8)); err != nil || n != 3 {
		t.Errorf("70B on 8 H200: %d stages, %v; want 3", n, err)
	}
	_, err := StagesNeeded(fp, []int64{h200, h200})
	if err == nil || !strings.Contains(err.Error(), "does not fit 2 device(s) of 139.7 GiB") || !strings.Contains(err.Error(), "docs/multi-node.md") {
		t.Errorf("70B on 2 H200: %v", err)
	}
	// a model that fits one device stays on one; no GPU at all is one process
	small, _ := models.Open("../testdata/fixtures/llama-tiny")
	if n, err := StagesNeeded(MeasureFootprint(small), []int64{h200, h200}); err != nil || n != 1 {
		t.Errorf("llama-tiny: %d, %v", n, err)
	}
	if n, err := StagesNeeded(fp, nil); err != nil || n != 1 {
		t.Errorf("no GPUs: %d, %v", n, err)
	}
	// never more stages than decoder layers
	two := MeasureFootprint(small)
	two.Weights, two.Layer = 1<<41, 1<<40
	if _, err := StagesNeeded(two, slices.Repeat([]int64{h200}, 8)); err == nil || !strings.Contains(err.Error(), "over 2") {
		t.Errorf("more stages than layers: %v", err)
	}
}

// Every Python file of harness/python is embedded (a bare directory pattern would drop files
// starting with "_"; an explicit list can miss a new one).
func TestEmbeddedPythonComplete(t *testing.T) {
	var onDisk, embedded []string
	entries, err := os.ReadDir("python")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && (filepath.Ext(e.Name()) == ".py" || filepath.Ext(e.Name()) == ".txt") {
			onDisk = append(onDisk, e.Name())
		}
	}
	fs.WalkDir(Python, "python", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			embedded = append(embedded, filepath.Base(p))
		}
		return nil
	})
	slices.Sort(onDisk)
	slices.Sort(embedded)
	if !slices.Equal(onDisk, embedded) {
		t.Errorf("embedded %v, harness/python holds %v", embedded, onDisk)
	}
}
