package plan

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/xpuinject/xpuinject/kernels"
	"github.com/xpuinject/xpuinject/models"
)

// The -update flag rewrites golden files. Other test files of this package may define
// it too; whichever initializes first wins and the rest reuse it.
var _ = defineUpdateFlag()

func defineUpdateFlag() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files under testdata/")
	}
	return true
}

func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

const fixturesDir = "../../testdata/fixtures"

// TestPlanGolden plans every fixture and compares the YAML with
// testdata/golden/<fixture>.yaml (go test ./inject/plan -run TestPlanGolden -update).
func TestPlanGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(fixturesDir, "*", "config.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures under %s (%v)", fixturesDir, err)
	}
	seen := map[string]bool{}
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		name := filepath.Base(dir)
		seen[name+".yaml"] = true
		t.Run(name, func(t *testing.T) {
			g, err := models.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			p, err := New(g, nil, Options{Tool: "xpuinject (golden)", Source: Source{Path: "testdata/fixtures/" + name}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := MarshalYAML(p)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", name+".yaml")
			if updating() {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("plan differs from %s (run with -update after checking the diff):\n%s", golden, firstDiff(got, want))
			}
			// The YAML and JSON forms read back into the same plan.
			back, err := ParseYAML(got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, p) {
				t.Error("plan YAML does not round-trip")
			}
			j, err := MarshalJSON(p)
			if err != nil {
				t.Fatal(err)
			}
			var pj Plan
			if err := json.Unmarshal(j, &pj); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&pj, p) {
				t.Error("plan JSON does not round-trip")
			}
			checkPlanInvariants(t, g, p)
		})
	}
	// No stale golden files for fixtures that are gone.
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.yaml"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("golden %s has no fixture", f)
		}
	}
}

// checkPlanInvariants: every source tensor but training counters is read by some output
// (tied heads aside), outputs are unique, replaced layers name a layer class and bind their
// own module first, each module is bound once, to a layer contract.json says replaces its
// class, and every packed attribute an output attaches is one its binding reads.
func checkPlanInvariants(t *testing.T, g *models.Graph, p *Plan) {
	t.Helper()
	read := map[string]bool{}
	outs := map[string]bool{}
	bound := map[string]bool{}
	for _, l := range p.Layers {
		if l.Kernel != KernelKeep && l.Layer == "" {
			t.Errorf("%s: kernel %s without a layer class", l.Module, l.Kernel)
		}
		if (l.Layer == "") != (len(l.Bindings) == 0) || (l.Layer != "" && (l.Bindings[0].Module != l.Module || l.Bindings[0].Layer != l.Layer)) {
			t.Errorf("%s: layer %q, bindings %+v", l.Module, l.Layer, l.Bindings)
		}
		for _, b := range l.Bindings {
			if bound[b.Module] {
				t.Errorf("module %s bound twice", b.Module)
			}
			bound[b.Module] = true
			if !kernels.LayerReplaces(b.Layer, b.Class) {
				t.Errorf("%s: contract.json does not let %s replace %s", b.Module, b.Layer, b.Class)
			}
		}
		for _, o := range l.Outputs {
			if o.Attr != "" && !slices.Contains(l.Bindings[0].Reads, o.Attr) {
				t.Errorf("%s: output %s attaches %s, which its binding does not read (%v)", l.Module, o.Name, o.Attr, l.Bindings[0].Reads)
			}
		}
		for _, o := range l.Outputs {
			if outs[o.Name] {
				t.Errorf("output %s twice", o.Name)
			}
			outs[o.Name] = true
			for _, s := range o.Sources {
				read[s] = true
				if t := g.Checkpoint.Tensors[s]; t != nil && t.Of != "" {
					read[t.Of] = true // a view reads its stacked parent
				}
			}
		}
	}
	for name := range g.Checkpoint.Tensors {
		if !read[name] && !isTrainingCounter(name) {
			t.Errorf("source tensor %s is read by no output", name)
		}
	}
}

func isTrainingCounter(name string) bool {
	return filepath.Ext(name) == ".num_batches_tracked"
}

func firstDiff(a, b []byte) string {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y []byte
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, x, y)
		}
	}
	return ""
}
