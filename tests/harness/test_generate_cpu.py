"""`xpuinject generate RUN_DIR` on the CPU (Triton interpreter, eager runtime steps): the text
streams on stdout, the summary names both models, and the tokens are model.generate's greedy
tokens for the injected and the stock model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent.parent
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"
PROMPT = "The quick brown fox"


def generate(llama_odd_run, *extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="1")
    return subprocess.run([str(BIN), "generate", str(llama_odd_run), "--prompt", PROMPT, "--device", "cpu", *extra],
                          capture_output=True, text=True, timeout=600, env=env)


def reference(llama_odd_run, n):
    """Greedy tokens of model.generate for the injected and the stock model."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import transformers

    from xpuinject_kernels import inject

    tok = transformers.AutoTokenizer.from_pretrained(FIXTURES / "llama-odd")
    ids = tok(PROMPT, return_tensors="pt").input_ids
    out = {}
    for name in ("injected", "stock"):
        m = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / "llama-odd", dtype=torch.bfloat16).eval()
        if name == "injected":
            inject(m, packed=llama_odd_run / "packed", plan=llama_odd_run / "package" / "plan.yaml")
        with torch.no_grad():
            out[name] = m.generate(ids, max_new_tokens=n, do_sample=False)[0, ids.shape[1]:].tolist()
    return out


def test_generate_streams_and_matches_model_generate(llama_odd_run):
    r = generate(llama_odd_run, "--max-new-tokens", "5", "--stock", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)  # stdout is the one JSON document; the text streamed to stderr
    ref = reference(llama_odd_run, 5)
    assert res["injected"]["tokens"] == ref["injected"] and res["stock"]["tokens"] == ref["stock"]
    # stderr: each model's prompt and continuation, streamed
    text = r.stderr
    assert text.count(PROMPT) == 2
    assert res["injected"]["text"] in text and res["stock"]["text"] in text
    assert res["injected"]["graphs"] is False and "cpu has no device graphs" in res["injected"]["reason"]
    assert res["injected"]["new_tokens"] == len(ref["injected"]) and res["injected"]["ms_per_token"] > 0


def test_generate_summary_and_bad_input(llama_odd_run):
    r = generate(llama_odd_run, "--max-new-tokens", "2")
    assert r.returncode == 0, r.stderr
    last = r.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("injected  2 tokens: ") and "tokens/s" in last and "ms/token" in last and "(eager: cpu has no device graphs)" in last
    # a bad count is refused before Python starts
    r = generate(llama_odd_run, "--max-new-tokens", "-1")
    assert r.returncode == 2 and "--max-new-tokens -1" in r.stderr and r.stdout == ""
