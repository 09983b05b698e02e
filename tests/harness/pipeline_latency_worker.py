"""A torchrun worker for test_eval_sharded.py: the eval driver's latency code (prefill, and decode
steps under the package's runtime without graphs) on a two-stage pipeline over gloo. Rank 0
writes what it measured to the JSON file named by the last argument."""

import json
import sys
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "harness" / "python"))
import eval_driver as d  # noqa: E402


def main(model, run_dir, out):
    args = d.parse_args(["--model", model, "--package", f"{run_dir}/package", "--packed", f"{run_dir}/packed",
                         "--out", out, "--device", "cpu", "--prefill", "16", "--decode-batches", "1,2", "--repeats", "2",
                         "--decode-steps", "3"])
    run = d.sharded.Run.from_env("cpu", d.fail)
    cfg = transformers.AutoConfig.from_pretrained(model)
    stock = d.load(transformers.LlamaForCausalLM, model, torch.bfloat16, run.device, run)
    rt = d.runtime_module(args.package, run.device)
    errors = {}
    # stock eager only: the pipeline's exchanges and the runtime's static cache are what is
    # tested; the injected eager path adds the interpreted kernels' minutes and nothing else
    lat = d.latency(d.Paths(stock, stock, rt, errors), ("stock_eager",), cfg, run.device, args)
    peak = run.max_over_ranks(1000 + run.rank)
    if run.main:
        Path(out).write_text(json.dumps({"latency": lat, "errors": errors, "peak": peak, "world": run.world}))
    run.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
    # as the driver ends: the stage's gloo group is not left to the interpreter's finalization
    d.exit_now()
