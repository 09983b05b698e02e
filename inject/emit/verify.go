package emit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/xpuinject/xpuinject/inject/pack"
	"github.com/xpuinject/xpuinject/inject/plan"
	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// ErrDigest marks a package and a packed checkpoint (or a package and its own plan)
// that do not carry the same plan digest (PLAN.md, "Plan digest").
var ErrDigest = errors.New("inject: plan digest mismatch")

// PackagePlan is a package's plan and the sha256 of its plan.yaml bytes.
type PackagePlan struct {
	Plan   *plan.Plan
	File   string // the plan.yaml read
	SHA256 string // hex sha256 of its bytes as read
}

// ReadPlan reads the plan.yaml of a package written by Write, checks that the
// package has its variants and that each variant's metadata.json records the digest of
// exactly these bytes.
func ReadPlan(dir string) (*PackagePlan, error) {
	file := filepath.Join(dir, plan.FileName)
	b, err := models.ReadSmallFile(file)
	if err != nil {
		return nil, fmt.Errorf("inject: package %s: %w (is it a folder written by 'xpuinject package'?)", dir, err)
	}
	p, err := plan.ParseYAML(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	sum := sha256.Sum256(b)
	pp := &PackagePlan{Plan: p, File: file, SHA256: hex.EncodeToString(sum[:])}
	return pp, nil
}

// CheckDigests checks that plan.yaml is the plan the package was written for (every
// variant's metadata.json records its sha256), then the packed checkpoint in packedDir
// (CheckPacked).
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
	return pp.CheckPacked(packedDir)
}

// packedChecks implement contract.json's packed_checks, by name (contract_test.go and
// the package's injection.py check the same list).
var packedChecks = map[string]func(pp *PackagePlan, packedDir string) error{
	"plan_digest":  (*PackagePlan).checkPlanDigest,
	"shard_digest": (*PackagePlan).checkShardDigests,
	"present":      func(pp *PackagePlan, dir string) error { return pack.VerifyTensors(pp.Plan, dir, "present") },
	"dtype":        func(pp *PackagePlan, dir string) error { return pack.VerifyTensors(pp.Plan, dir, "dtype") },
	"shape":        func(pp *PackagePlan, dir string) error { return pack.VerifyTensors(pp.Plan, dir, "shape") },
}

// CheckPacked checks the packed checkpoint in packedDir against the package's plan:
// every property contract.json lists (packed_checks), in its order.
func (pp *PackagePlan) CheckPacked(packedDir string) error {
	for _, c := range kernels.TheContract().PackedChecks {
		check, ok := packedChecks[c.Name]
		if !ok {
			return fmt.Errorf("inject: %s lists packed check %q, which this xpuinject does not know", kernels.ContractFile, c.Name)
		}
		if err := check(pp, packedDir); err != nil {
			return err
		}
	}
	return nil
}

func (pp *PackagePlan) checkPlanDigest(packedDir string) error {
	packedPlan := filepath.Join(packedDir, plan.FileName)
	b, err := models.ReadSmallFile(packedPlan)
	if err != nil {
		return fmt.Errorf("inject: packed checkpoint %s: %w (is it a folder written by 'xpuinject pack'?)", packedDir, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != pp.SHA256 {
		return fmt.Errorf("%w: the packed checkpoint %s was packed from another plan (%s has sha256 %s, the package's plan.yaml %s); re-run 'xpuinject pack' or pass the matching --packed",
			ErrDigest, packedDir, packedPlan, hex.EncodeToString(sum[:]), pp.SHA256)
	}
	return nil
}

func (pp *PackagePlan) checkShardDigests(packedDir string) error {
	files, err := pack.Files(packedDir)
	if err != nil {
		return err
	}
	for _, f := range files {
		h, err := pack.ReadHeader(f)
		if err != nil {
			return err
		}
		if got := h.Metadata[pack.MetaPlanSHA256]; got != pp.SHA256 {
			return fmt.Errorf("%w: %s was packed from another plan (%s %q, the package's plan.yaml has sha256 %s); re-run 'xpuinject pack'",
				ErrDigest, f, pack.MetaPlanSHA256, got, pp.SHA256)
		}
	}
	return nil
}
