package pack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/models"
)

func ReadHeader(p string) (*models.Header, error) {
	fh, st, err := models.OpenRegular(p)
	if err != nil {
		return nil, fmt.Errorf("inject: packed checkpoint: %w", err)
	}
	defer fh.Close()
	h, err := models.ReadHeader(fh, st.Size(), p)
	if err != nil {
		return nil, fmt.Errorf("inject: packed checkpoint: %w", err)
	}
	return h, nil
}

// Verify checks that the packed checkpoint in dir holds every output tensor of
// plan with the planned dtype and shape, so a plan/checkpoint mismatch is caught before
// any GPU work starts.
func Verify(pl *plan.Plan, dir string) error {
	return VerifyTensors(pl, dir, "present", "dtype", "shape")
}

// VerifyTensors is Verify for some of its properties: "present", "dtype", "shape" (a
// tensor that is missing is not looked at further).
func VerifyTensors(pl *plan.Plan, dir string, props ...string) error {
	want := map[string]bool{}
	for _, p := range props {
		want[p] = true
	}
	files, err := Files(dir)
	if err != nil {
		return err
	}
	have := map[string]*models.Tensor{}
	for _, p := range files {
		h, err := ReadHeader(p)
		if err != nil {
			return err
		}
		for _, t := range h.Tensors {
			have[t.Name] = t
		}
	}
	var problems []string
	for _, l := range pl.Layers {
		for _, o := range l.Outputs {
			t, ok := have[o.Name]
			switch {
			case !ok:
				if want["present"] {
					problems = append(problems, fmt.Sprintf("tensor %q (layer %s) is missing", o.Name, l.Module))
				}
			case want["dtype"] && string(t.DType) != o.DType:
				problems = append(problems, fmt.Sprintf("tensor %q is %s, plan says %s", o.Name, t.DType, o.DType))
			case want["shape"] && fmt.Sprint(t.Shape) != fmt.Sprint(o.Shape):
				problems = append(problems, fmt.Sprintf("tensor %q has shape %v, plan says %v", o.Name, t.Shape, o.Shape))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
		}
		return fmt.Errorf("inject: packed checkpoint %s does not match the plan (was it packed from another plan?): %s",
			dir, strings.Join(problems, "; "))
	}
	return nil
}

func Files(dir string) ([]string, error) {
	idx := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := models.ReadSmallFile(idx); err == nil {
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ix); err != nil {
			return nil, fmt.Errorf("inject: %s: %s", idx, models.JSONError(err))
		}
		seen := map[string]bool{}
		var out []string
		for _, f := range ix.WeightMap {
			if strings.Contains(f, "/") || strings.Contains(f, `\`) || f == ".." {
				return nil, fmt.Errorf("inject: %s: shard %q is not a file name", idx, f)
			}
			if !seen[f] {
				seen[f] = true
				out = append(out, filepath.Join(dir, f))
			}
		}
		sort.Strings(out)
		return out, nil
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err != nil {
		return nil, fmt.Errorf("inject: %s has neither model.safetensors nor model.safetensors.index.json (is it a folder written by 'xpuinject pack'?)", dir)
	}
	return []string{single}, nil
}
