// Package harness runs the Python side of an evaluation: it finds an interpreter with
// torch/transformers/triton, writes the embedded eval driver and shim into a work
// folder, runs the driver on the GPU (or the CPU under the Triton interpreter), and
// turns its eval.json into report.md and PNG plots.
package harness

import "embed"

// Python holds the eval and generate drivers, the injection shim and the shipped prose text.
// Explicit names: a bare directory pattern would silently drop files starting with "_".
//
//go:embed python/eval_driver.py python/generate_driver.py python/xpuinject_shim.py python/prose.txt
var Python embed.FS

// ShimSource is the injection shim, written beside every emitted package.
func ShimSource() []byte {
	b, err := Python.ReadFile("python/xpuinject_shim.py")
	if err != nil {
		panic("harness: embedded shim missing: " + err.Error()) // compiled in; cannot happen
	}
	return b
}
