// Package harness runs the Python side of an evaluation: it finds an interpreter with
// torch/transformers/triton, writes the embedded eval driver into a work folder, runs it on
// the GPU (or the CPU under the Triton interpreter) against the emitted package, which
// injects itself, and turns its eval.json into report.md and PNG plots.
package harness

import "embed"

// Python holds the eval and generate drivers, the eval's placement, latency and compile-helper
// modules (imported by the eval driver, which the generate driver imports) and the shipped prose
// text.
// Explicit names: a bare directory pattern would silently drop files starting with "_".
//
//go:embed python/eval_driver.py python/eval_sharded.py python/latency.py python/compile_helpers.py python/generate_driver.py python/prose.txt
var Python embed.FS

// driverModules are the modules the eval driver imports from its own folder.
var driverModules = []string{"eval_driver.py", "eval_sharded.py", "latency.py", "compile_helpers.py"}
