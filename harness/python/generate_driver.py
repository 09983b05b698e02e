"""xpuinject generate driver: text from a prompt with the injected model (and the stock one) under
the package's graph runtime, streamed as it is generated.

Run by `xpuinject generate`, which writes this file and the eval driver (for its package loader)
into a work folder. stdout gets
only the text (prompt, then each model's continuation as it comes); progress goes to stderr as
`xpuinject-generate: ...` lines; the numbers go to the --out JSON file.
Exit codes: 0 ok, 2 bad arguments / missing input, 3 a missing Python package or device,
4 injection failed, 5 generation failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path


def progress(msg: str) -> None:
    print(f"xpuinject-generate: {msg}", file=sys.stderr, flush=True)


def fail(code: int, msg: str):
    print(f"xpuinject-generate: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="source checkpoint folder (config.json, safetensors, tokenizer)")
    p.add_argument("--package", required=True)
    p.add_argument("--packed", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--stock", action="store_true", help="also generate with the stock model")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "xpu", "cpu"])
    p.add_argument("--do-sample", action="store_true")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="result JSON to write")
    a = p.parse_args(argv)
    if not a.prompt.strip():
        fail(2, "--prompt is empty")
    if a.max_new_tokens < 1:
        fail(2, f"--max-new-tokens must be at least 1, got {a.max_new_tokens}")
    return a


class Printer:
    """A streamer (put/end, like transformers' TextStreamer) that writes the decoded continuation
    to stdout as tokens arrive: the whole text is decoded each time and only its new tail printed,
    so multi-token characters come out whole."""

    def __init__(self, tok):
        self.tok, self.ids, self.shown, self.prompt = tok, [], 0, True

    def put(self, value):
        if self.prompt:  # generate feeds the prompt first
            self.prompt = False
            return
        self.ids.extend(int(v) for v in value.reshape(-1).tolist())
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # an incomplete character: wait for the rest
            return
        sys.stdout.write(text[self.shown:])
        sys.stdout.flush()
        self.shown = len(text)

    def end(self):
        text = self.tok.decode(self.ids, skip_special_tokens=True)
        sys.stdout.write(text[self.shown:] + "\n")
        sys.stdout.flush()


def run(name, model, rtmod, tok, ids, args):
    import torch

    r = rtmod.Runtime(model)
    progress(f"{name}:")
    kw = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, temperature=args.temperature,
              top_k=args.top_k, top_p=args.top_p)
    torch.manual_seed(args.seed)
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    t = time.perf_counter()
    out = r.generate(ids, streamer=Printer(tok), timings=True, **kw)
    wall = time.perf_counter() - t
    last = r.stats["last"]
    steps = last.get("step_ms") or []
    ms = statistics.median(steps) if steps else None
    res = {
        "tokens": out[0, ids.shape[1]:].tolist(), "new_tokens": last["new_tokens"],
        "text": tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True),
        "ms_per_token": ms, "tokens_per_s": (1e3 / ms) if ms else None,
        "prefill_ms": last.get("prefill_ms"), "wall_s": wall, "graphs": r.graphs, "reason": r.stats["reason"],
        "capture_s": r.stats["capture_s"], "cache_len": last["cache_len"],
    }
    progress(f"{name}: {res['new_tokens']} tokens, " + (f"{ms:.3f} ms/token" if ms else "no decode steps") +
             (" (graph)" if r.graphs else f" (eager: {r.stats['reason']})"))
    r.release()
    return res


def main(argv=None):
    args = parse_args(argv)
    for p in (args.model, args.package, args.packed):
        if not Path(p).is_dir():
            fail(2, f"{p}: no such folder")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import torch
        import transformers
    except ImportError as e:
        fail(3, f"python package missing: {e.name} (run scripts/setup-venv.sh, or pip install torch transformers)")
    sys.path.insert(0, str(Path(__file__).parent))
    from eval_driver import load_package

    if args.device == "auto":
        dev = "cuda" if torch.cuda.is_available() else ("xpu" if hasattr(torch, "xpu") and torch.xpu.is_available() else "cpu")
    else:
        dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        fail(3, "--device cuda: torch sees no CUDA GPU")
    if dev == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        fail(3, "--device xpu: torch sees no XPU")
    if dev == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        fail(3, "no GPU: the kernels run on the CPU only under TRITON_INTERPRET=1 (use --device cpu)")
    device = torch.device(dev)
    tok = transformers.AutoTokenizer.from_pretrained(args.model)
    ids = tok(args.prompt, return_tensors="pt").input_ids.to(device)
    if ids.shape[1] == 0:
        fail(2, "--prompt encodes to no tokens")
    try:
        pkg, _ = load_package(args.package, device)
    except Exception as e:
        traceback.print_exc()
        fail(4, f"loading the package {args.package}: {type(e).__name__}: {e}")
    rtmod = getattr(pkg, "runtime", None)
    if rtmod is None:
        fail(2, f"{args.package}: the package has no graph runtime (written by an older xpuinject): write it again with 'xpuinject package'")
    result = {"device": dev, "prompt_tokens": int(ids.shape[1])}

    def load():
        return transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).eval().to(device)

    progress(f"loading {args.model} (bf16) on {dev}, injecting {args.package}")
    model = load()
    try:
        pkg.inject(model, packed=args.packed)
    except pkg.InjectError as e:
        fail(4, str(e))
    try:
        result["injected"] = run("injected", model, rtmod, tok, ids, args)
        del model
        if args.stock:
            if dev == "cuda":
                torch.cuda.empty_cache()
            result["stock"] = run("stock", load(), rtmod, tok, ids, args)
    except ValueError as e:
        if not str(e).startswith("runtime:"):  # the runtime's own argument checks are bad input
            traceback.print_exc()
            fail(5, f"generation failed: ValueError: {e}")
        fail(2, str(e))
    except Exception as e:
        traceback.print_exc()
        fail(5, f"generation failed: {type(e).__name__}: {e}")
    out = Path(args.out)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
