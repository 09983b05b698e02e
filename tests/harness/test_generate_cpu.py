"""`xpuinject generate RUN_DIR` on the CPU (Triton interpreter, eager runtime steps): the text
streams on stdout, the summary names both models, and the tokens are model.generate's greedy
tokens for the injected and the stock model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = ROOT / "bin" / "xpuinject"
FIXTURES = ROOT / "testdata" / "fixtures"
PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if not BIN.is_file():
        pytest.fail(f"{BIN} is missing: scripts/test builds it (go build -o bin/xpuinject ./cmd/xpuinject)")
    out = tmp_path_factory.mktemp("gen") / "run"
    r = subprocess.run([str(BIN), str(FIXTURES / "llama-odd"), "--out", str(out), "--skip-eval"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def generate(run_dir, *extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="1")
    return subprocess.run([str(BIN), "generate", str(run_dir), "--prompt", PROMPT, "--device", "cpu", *extra],
                          capture_output=True, text=True, timeout=600, env=env)


def reference(run_dir, n):
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
            inject(m, packed=run_dir / "packed", plan=run_dir / "package" / "plan.yaml")
        with torch.no_grad():
            out[name] = m.generate(ids, max_new_tokens=n, do_sample=False)[0, ids.shape[1]:].tolist()
    return out


def test_generate_streams_and_matches_model_generate(run_dir):
    r = generate(run_dir, "--max-new-tokens", "5", "--stock", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)  # stdout is the one JSON document; the text streamed to stderr
    ref = reference(run_dir, 5)
    assert res["injected"]["tokens"] == ref["injected"] and res["stock"]["tokens"] == ref["stock"]
    # stderr: each model's prompt and continuation, streamed
    text = r.stderr
    assert text.count(PROMPT) == 2
    assert res["injected"]["text"] in text and res["stock"]["text"] in text
    assert res["injected"]["graphs"] is False and "cpu has no device graphs" in res["injected"]["reason"]
    assert res["injected"]["new_tokens"] == len(ref["injected"]) and res["injected"]["ms_per_token"] > 0


def test_generate_summary_and_bad_input(run_dir):
    r = generate(run_dir, "--max-new-tokens", "2")
    assert r.returncode == 0, r.stderr
    last = r.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("injected  2 tokens: ") and "tokens/s" in last and "ms/token" in last and "(eager: cpu has no device graphs)" in last
    # a bad count is refused before Python starts
    r = generate(run_dir, "--max-new-tokens", "-1")
    assert r.returncode == 2 and "--max-new-tokens -1" in r.stderr and r.stdout == ""
