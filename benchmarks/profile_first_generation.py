"""Why a stock model's first greedy generation is slow: each setting in a fresh process.

The eval's greedy generation (transformers' generate, 4 prompts of 32 tokens, 128 new tokens,
eager, DynamicCache) runs once per model. On the H200 stock's took 6-10 s against 2-3 s for the
injected model. This times that generation twice per process, the second as the steady state,
per step, under:

  default   SDPA as torch picks its backend
  nocudnn   SDPA with the cuDNN backend off (torch.backends.cuda.enable_cudnn_sdp(False))
  eager     attn_implementation="eager"
  profile   default, with torch.profiler's top host-time ops over the first generation

    python3 benchmarks/profile_first_generation.py MODEL_DIR > first-generation.txt   # GPU

A first step far above the steady one, gone with cuDNN off, is a plan built per new KV length.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

MODES = ("default", "nocudnn", "eager", "profile")


def run(mode: str, model_dir: str, prompts: int, length: int, new: int) -> dict:
    t0 = time.perf_counter()
    import torch
    import transformers

    if mode == "nocudnn":
        torch.backends.cuda.enable_cudnn_sdp(False)
    kw = {"attn_implementation": "eager"} if mode == "eager" else {}
    m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, **kw).eval().to("cuda")
    loaded = time.perf_counter() - t0
    ids = torch.randint(3, m.config.vocab_size, (prompts, length), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    stamps = []

    class Stamp(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            return scores

    def generate():
        stamps.clear()
        t = time.perf_counter()
        with torch.no_grad():
            m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                       eos_token_id=None, pad_token_id=0, logits_processor=transformers.LogitsProcessorList([Stamp()]))
        torch.cuda.synchronize()
        steps = [b - a for a, b in zip([t] + stamps[:-1], stamps)]
        return time.perf_counter() - t, steps

    out = {"mode": mode, "load_s": round(loaded, 2), "attn_implementation": m.config._attn_implementation}
    if mode == "profile":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            first, steps = generate()
        out["top_host_ops"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    else:
        first, steps = generate()
    second, steady = generate()
    median = lambda xs: sorted(xs)[len(xs) // 2] * 1e3  # noqa: E731
    out.update({"first_s": round(first, 3), "second_s": round(second, 3),
                "first_prefill_ms": round(steps[0] * 1e3, 1),
                "first_steps_ms": [round(x * 1e3, 1) for x in steps[1:12]],
                "first_step_median_ms": round(median(steps[1:]), 2),
                "steady_step_median_ms": round(median(steady[1:]), 2)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a causal LM's folder")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child process: this mode only
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run(a.one, a.model, a.prompts, a.length, a.new_tokens)))
        return 0
    rc = 0
    for mode in a.modes.split(","):
        if mode not in MODES:
            ap.error(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
        # a fresh process each: no plan or cache of an earlier mode
        r = subprocess.run([sys.executable, __file__, a.model, "--one", mode, "--prompts", str(a.prompts),
                            "--length", str(a.length), "--new-tokens", str(a.new_tokens)], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{mode}: failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
            rc = 1
            continue
        got = json.loads(r.stdout.strip().splitlines()[-1])
        table = got.pop("top_host_ops", None)
        print(json.dumps(got))
        if table:
            print(table)
    return rc


if __name__ == "__main__":
    sys.exit(main())
