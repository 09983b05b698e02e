package pack

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// TestPlanPacksEveryFixture hands each fixture's plan (all kernels, and with every
// kernel disabled, so kept layers too; bf16 and fp16) to Write: every output the planner
// writes must be one pack can compute, and Verify must find the result matching the plan.
func TestPlanPacksEveryFixture(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(fixturesDir, "*", "config.json"))
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		for _, c := range []struct {
			disable []string
			dtype   string
		}{{nil, plan.DTypeBF16}, {kernels.Default().Names(), plan.DTypeBF16}, {nil, plan.DTypeFP16}} {
			disable := c.disable
			t.Run(fmt.Sprintf("%s/disable=%d/%s", filepath.Base(dir), len(disable), c.dtype), func(t *testing.T) {
				g, err := models.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				p, err := plan.New(g, nil, plan.Options{Tool: "xpuinject (test)", Disable: disable, DType: c.dtype})
				if err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(t.TempDir(), "packed")
				if _, err := Write(context.Background(), g.Checkpoint, p, out, Options{Tool: "xpuinject (test)"}); err != nil {
					t.Fatalf("pack: %v", err)
				}
				if err := Verify(p, out); err != nil {
					t.Fatalf("verify: %v", err)
				}
			})
		}
	}
}

const fixturesDir = "../../testdata/fixtures"
