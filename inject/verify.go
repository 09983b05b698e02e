package inject

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/xpuinject/xpuinject/models"
)

// ReadPackagePlan reads the plan.yaml of a package written by Emit and checks the
// package has its variants.
func ReadPackagePlan(dir string) (*Plan, error) {
	b, err := os.ReadFile(filepath.Join(dir, "plan.yaml"))
	if err != nil {
		return nil, fmt.Errorf("inject: package %s: %w (is it a folder written by 'xpuinject package'?)", dir, err)
	}
	p, err := UnmarshalPlanYAML(b)
	if err != nil {
		return nil, fmt.Errorf("inject: package %s: %w", dir, err)
	}
	for _, be := range emitBackends {
		if _, err := os.Stat(filepath.Join(dir, "build", "torch-"+be, "metadata.json")); err != nil {
			return nil, fmt.Errorf("inject: package %s: no build/torch-%s/metadata.json", dir, be)
		}
	}
	return p, nil
}

// VerifyPacked checks that the packed checkpoint in dir holds every output tensor of
// plan with the planned dtype and shape, so a plan/checkpoint mismatch is caught before
// any GPU work starts.
func VerifyPacked(plan *Plan, dir string) error {
	files, err := packedFiles(dir)
	if err != nil {
		return err
	}
	have := map[string]*models.Tensor{}
	for _, p := range files {
		fh, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("inject: packed checkpoint: %w", err)
		}
		st, err := fh.Stat()
		if err != nil {
			fh.Close()
			return fmt.Errorf("inject: packed checkpoint: %w", err)
		}
		h, err := models.ReadHeader(fh, st.Size(), p)
		fh.Close()
		if err != nil {
			return fmt.Errorf("inject: packed checkpoint: %w", err)
		}
		for _, t := range h.Tensors {
			have[t.Name] = t
		}
	}
	var problems []string
	for _, l := range plan.Layers {
		for _, o := range l.Outputs {
			t, ok := have[o.Name]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("tensor %q (layer %s) is missing", o.Name, l.Module))
			case string(t.DType) != o.DType:
				problems = append(problems, fmt.Sprintf("tensor %q is %s, plan says %s", o.Name, t.DType, o.DType))
			case fmt.Sprint(t.Shape) != fmt.Sprint(o.Shape):
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

func packedFiles(dir string) ([]string, error) {
	idx := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idx); err == nil {
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ix); err != nil {
			return nil, fmt.Errorf("inject: %s: %w", idx, err)
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
