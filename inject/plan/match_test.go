package plan

import (
	"strings"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

func TestCheckPlanMatches(t *testing.T) {
	load := func(name string) (*models.Graph, *Plan) {
		g, err := models.Load("../../testdata/fixtures/" + name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(g, kernels.Default(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return g, p
	}
	tiny, tinyPlan := load("llama-tiny")
	odd, _ := load("llama-odd")
	qwen, _ := load("qwen3-tiny")
	if err := CheckMatches(tinyPlan, tiny); err != nil {
		t.Fatalf("a model's own plan: %v", err)
	}
	if err := CheckMatches(tinyPlan, odd); err == nil || !strings.Contains(err.Error(), "hidden is 160 in the model, 64 in the plan") {
		t.Errorf("llama-odd vs llama-tiny's plan: %v", err)
	}
	if err := CheckMatches(tinyPlan, qwen); err == nil || !strings.Contains(err.Error(), `model_type "llama", the model is "qwen3"`) {
		t.Errorf("qwen3 vs a llama plan: %v", err)
	}
}
