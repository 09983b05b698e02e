"""benchmarks/knockout.py: each name knocks its launch out of an injected model's decode step
(the call site reads the patched name), nothing else, and the package is as loaded afterwards."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import transformers

from test_bench_smoke import load
from test_inject import load_package

FIXTURE = Path(__file__).resolve().parents[2] / "testdata" / "fixtures" / "qwen3-moe-tiny"


@pytest.fixture(scope="module")
def moe_pkg(qwen3_moe_tiny_run):
    pkg = load_package(qwen3_moe_tiny_run / "package", "kernels")
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.bfloat16).eval()
    pkg.inject(model, packed=qwen3_moe_tiny_run / "packed")
    return pkg, model


def _decode_step(pkg, model):
    """A 12-token prefill, then one decode token: the decode step's launch counts and logits."""
    counts = sys.modules[f"{pkg.__name__}._backend"].launch_counts
    ids = torch.randint(3, 500, (1, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache = transformers.DynamicCache(config=model.config)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        before = dict(counts)
        out = model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True).logits.float()
    # launches only: a launcher's cache hits ("*.launch_cached") grow as its caches fill
    return {k: v - before.get(k, 0) for k, v in counts.items()
            if v - before.get(k, 0) and not k.endswith("cached")}, out


class _Spy:
    """Counts launches of a @triton.jit kernel the call site indexes by grid."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, 0

    def __getitem__(self, grid):
        self.calls += 1
        return self.kernel[grid]


def test_each_knockout_removes_its_launch_only(moe_pkg):
    ko = load("knockout")
    pkg, model = moe_pkg
    moe = sys.modules[f"{pkg.__name__}.moe"]
    base, logits = _decode_step(pkg, model)
    # the decode step as shipped: input norms (2 layers + the final one), one post-attention add + norm
    # outside the MoE block (the dense layer) and one inside it (unfused on the CPU), the MoE decode path
    assert base["rms_norm"] == 3 and base["add_rms_norm"] == 2 and base["moe.decode"] == 1, base
    routed = []
    real_route = moe.decode_route
    moe.decode_route = lambda *a, **k: routed.append(1) or real_route(*a, **k)
    try:
        with ko.knocked(pkg, ["input-norm"]):
            got, _ = _decode_step(pkg, model)
        assert "rms_norm" not in got and got["add_rms_norm"] == 2 and routed == [1]
        with ko.knocked(pkg, ["post-norm"]):
            got, _ = _decode_step(pkg, model)
        assert got["rms_norm"] == 3 and "add_rms_norm" not in got and got["moe.decode"] == 1
        routed.clear()
        with ko.knocked(pkg, ["router"]) as patched:
            got, _ = _decode_step(pkg, model)
            got2, _ = _decode_step(pkg, model)
            assert ko.describe(patched) == "moe.decode_route"
        # the stand-in's experts: the first top_k, equal weights, the same tensors every step
        assert routed == [] and got["moe.decode"] == 1 and got == got2
    finally:
        moe.decode_route = real_route
    after, again = _decode_step(pkg, model)
    assert after == base and torch.equal(again, logits)


def test_attention_reduce_knockout(moe_pkg):
    """The split reduce: a decode over 2 splits launches it; knocked out, it does not."""
    ko = load("knockout")
    pkg, _ = moe_pkg
    att = sys.modules[f"{pkg.__name__}.attention"]
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 1, 32, generator=g).to(torch.bfloat16)
    k = torch.randn(1, 2, 40, 32, generator=g).to(torch.bfloat16)
    v = torch.randn(1, 2, 40, 32, generator=g).to(torch.bfloat16)
    spy = _Spy(att._decode_reduce_kernel)
    att._decode_reduce_kernel = spy
    try:
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(2, 1),
                                                               v.float().repeat_interleave(2, 1))
        out = att.decode_attention(q, k, v, num_splits=2)
        assert spy.calls == 1 and (out.float().transpose(1, 2) - ref).abs().max().item() < 2e-2
        with ko.knocked(pkg, ["attn-reduce"]):
            att.decode_attention(q, k, v, num_splits=2)
        assert spy.calls == 1
        assert att._decode_reduce_kernel is spy
    finally:
        att._decode_reduce_kernel = spy.kernel


def test_unknown_names_are_refused():
    ko = load("knockout")
    assert ko.parse(" router, attn-reduce ") == ["router", "attn-reduce"] and ko.parse("") == []
    with pytest.raises(ValueError, match="unknown routr .*want a comma-separated subset of input-norm"):
        ko.parse("router,routr")
