package plan

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/xpuinject/xpuinject/models"
)

// CheckMatches reports whether plan was made for a model with g's structure: the same
// architecture, and for every planned layer a layer of g with the same module path, kind,
// dims and source tensor names. It is how eval catches a package or packed checkpoint made
// for another model before any GPU work starts.
func CheckMatches(plan *Plan, g *models.Graph) error {
	if plan.Arch != g.Arch {
		return fmt.Errorf("inject: the plan is for model_type %q, the model is %q", plan.Arch, g.Arch)
	}
	layers := make(map[string]models.Layer, len(g.Layers))
	for _, l := range g.Layers {
		layers[l.Module] = l
	}
	var problems []string
	for _, lp := range plan.Layers {
		l, ok := layers[lp.Module]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("module %s is not in the model", lp.Module))
			continue
		case string(l.Kind) != lp.Kind:
			problems = append(problems, fmt.Sprintf("module %s is %s in the model, %s in the plan", lp.Module, l.Kind, lp.Kind))
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(lp.Dims)) {
			if l.Dims[k] != lp.Dims[k] {
				problems = append(problems, fmt.Sprintf("module %s: %s is %d in the model, %d in the plan", lp.Module, k, l.Dims[k], lp.Dims[k]))
			}
		}
		for _, role := range slices.Sorted(maps.Keys(lp.Tensors)) {
			if l.Tensors[role] != lp.Tensors[role] {
				problems = append(problems, fmt.Sprintf("module %s: tensor %s is %q in the model, %q in the plan", lp.Module, role, l.Tensors[role], lp.Tensors[role]))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
	}
	return fmt.Errorf("inject: the package's plan was made for another model: %s", strings.Join(problems, "; "))
}
