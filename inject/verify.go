package inject

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/xpuinject/xpuinject/models"
)

// ErrDigest marks a package and a packed checkpoint (or a package and its own plan)
// that do not carry the same plan digest (PLAN.md, "Plan digest").
var ErrDigest = errors.New("inject: plan digest mismatch")

// PackagePlan is a package's plan and the sha256 of its plan.yaml bytes.
type PackagePlan struct {
	Plan   *Plan
	File   string // the plan.yaml read
	SHA256 string // hex sha256 of its bytes as read
}

// ReadPackagePlan reads the plan.yaml of a package written by Emit, checks that the
// package has its variants and that each variant's metadata.json records the digest of
// exactly these bytes.
func ReadPackagePlan(dir string) (*PackagePlan, error) {
	file := filepath.Join(dir, PlanFile)
	b, err := models.ReadSmallFile(file)
	if err != nil {
		return nil, fmt.Errorf("inject: package %s: %w (is it a folder written by 'xpuinject package'?)", dir, err)
	}
	p, err := UnmarshalPlanYAML(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	sum := sha256.Sum256(b)
	pp := &PackagePlan{Plan: p, File: file, SHA256: hex.EncodeToString(sum[:])}
	return pp, nil
}

// CheckDigests checks that plan.yaml is the plan the package was written for (every
// variant's metadata.json records its sha256) and the one the packed checkpoint in
// packedDir was packed from (its plan.yaml has the same sha256, and so does every
// shard's __metadata__).
func (pp *PackagePlan) CheckDigests(packedDir string) error {
	dir := filepath.Dir(pp.File)
	for _, be := range emitBackends {
		rel := filepath.Join("build", "torch-"+be, "metadata.json")
		b, err := models.ReadSmallFile(filepath.Join(dir, rel))
		if err != nil {
			return fmt.Errorf("inject: package %s: %w", dir, err)
		}
		var m struct {
			X struct {
				PlanSHA256 string `json:"plan_sha256"`
			} `json:"xpuinject"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("inject: package %s: %s: %s", dir, rel, models.JSONError(err))
		}
		switch m.X.PlanSHA256 {
		case pp.SHA256:
		case "":
			return fmt.Errorf("%w: %s records no xpuinject.plan_sha256 (written by an older xpuinject?); re-run 'xpuinject package'", ErrDigest, filepath.Join(dir, rel))
		default:
			return fmt.Errorf("%w: %s was changed after the package was written (its sha256 is %s, %s records %s); re-run 'xpuinject package'",
				ErrDigest, pp.File, pp.SHA256, rel, m.X.PlanSHA256)
		}
	}
	packedPlan := filepath.Join(packedDir, PlanFile)
	b, err := models.ReadSmallFile(packedPlan)
	if err != nil {
		return fmt.Errorf("inject: packed checkpoint %s: %w (is it a folder written by 'xpuinject pack'?)", packedDir, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != pp.SHA256 {
		return fmt.Errorf("%w: the packed checkpoint %s was packed from another plan (%s has sha256 %s, the package's plan.yaml %s); re-run 'xpuinject pack' or pass the matching --packed",
			ErrDigest, packedDir, packedPlan, hex.EncodeToString(sum[:]), pp.SHA256)
	}
	files, err := packedFiles(packedDir)
	if err != nil {
		return err
	}
	for _, f := range files {
		h, err := readHeaderOf(f)
		if err != nil {
			return err
		}
		if got := h.Metadata[MetaPlanSHA256]; got != pp.SHA256 {
			return fmt.Errorf("%w: %s was packed from another plan (%s %q, the package's plan.yaml has sha256 %s); re-run 'xpuinject pack'",
				ErrDigest, f, MetaPlanSHA256, got, pp.SHA256)
		}
	}
	return nil
}

func readHeaderOf(p string) (*models.Header, error) {
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
		h, err := readHeaderOf(p)
		if err != nil {
			return err
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
