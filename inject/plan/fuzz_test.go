package plan

import (
	"testing"

	"github.com/xpuinject/xpuinject/models"
)

// FuzzNewPlan plans Llama-family graphs of arbitrary dims and dtypes (shapes follow the
// dims, so overflowing products are possible): New must never panic, and a plan it
// returns has unique output names and non-negative output shapes.
func FuzzNewPlan(f *testing.F) {
	f.Add(int64(64), int64(2), int64(1), int64(32), int64(160), uint8(0), false, false, false)
	f.Add(int64(160), int64(5), int64(5), int64(32), int64(416), uint8(1), true, false, true)
	f.Add(int64(70), int64(3), int64(2), int64(48), int64(123), uint8(2), true, true, false)
	f.Add(int64(1)<<62, int64(4), int64(2), int64(1)<<61, int64(1)<<62, uint8(3), false, true, false)
	dtypes := []models.DType{models.F32, models.F16, models.BF16, models.F64, models.I8}
	f.Fuzz(func(t *testing.T, hidden, heads, kv, hd, inter int64, dt uint8, bias, qkNorm, tied bool) {
		c := llamaCfg{hidden: hidden, heads: heads, kv: kv, hd: hd, inter: inter, vocab: 512, blocks: 1,
			dt: dtypes[int(dt)%len(dtypes)], bias: bias, qkNorm: qkNorm, tied: tied}
		p, err := New(llama(c).graph(), nil, Options{})
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, l := range p.Layers {
			for _, o := range l.Outputs {
				if seen[o.Name] {
					t.Fatalf("output %s twice", o.Name)
				}
				seen[o.Name] = true
				for _, d := range o.Shape {
					if d < 0 {
						t.Fatalf("output %s shape %v", o.Name, o.Shape)
					}
				}
			}
		}
	})
}
