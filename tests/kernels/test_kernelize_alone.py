"""The kernel package alone, no packed weights and no plan for the model: one emitted package
(written for llama-odd) kernelized into a fixture model of every supported architecture through
the real `kernels.kernelize`. Every layer the planner plans for that fixture (its golden plan)
binds, and nothing else; the outputs are within the pipeline's accuracy thresholds of stock; and
nothing leaks: a stock model built afterwards in the same process is bit-equal to one built before.

Thresholds (tests/harness/test_pipeline_cpu.py's), against the fp32 model: the kernelized bf16
model's mean abs error, mean relative error and KL at most 1.5x stock bf16's, cosine >= 0.999,
top-1 agreement at most 5 points below stock's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
import yaml

import metrics

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"
GOLDEN = ROOT / "inject" / "plan" / "testdata" / "golden"
ALL = sorted(p.parent.name for p in FIXTURES.glob("*/config.json"))


@pytest.fixture(scope="module")
def pkg(llama_odd_pkg):
    """The package `xpuinject llama-odd` emits; kernelize needs none of its plan or packed weights."""
    return llama_odd_pkg


def model_class(fixture):
    cfg = transformers.AutoConfig.from_pretrained(FIXTURES / fixture)
    return getattr(transformers, cfg.architectures[0]), cfg


def build(fixture, dtype=torch.bfloat16, device="cpu"):
    cls, cfg = model_class(fixture)
    # SDPA ignores attention soft-capping (Gemma 2): such models run eager, as the eval loads them
    kw = {"attn_implementation": "eager"} if getattr(cfg, "attn_logit_softcapping", None) else {}
    return cls.from_pretrained(FIXTURES / fixture, dtype=dtype, **kw).eval().to(device)


def inputs(fixture):
    _, cfg = model_class(fixture)
    g = torch.Generator().manual_seed(11)
    if cfg.model_type == "levit":
        return {"pixel_values": torch.randn(8, 3, cfg.image_size, cfg.image_size, generator=g)}
    return {"input_ids": torch.randint(0, cfg.vocab_size, (2, 24), generator=g)}


def run(model, x):
    p = next(model.parameters())
    x = {k: v.to(p.device, p.dtype) if v.is_floating_point() else v.to(p.device) for k, v in x.items()}
    with torch.no_grad():
        return model(**x).logits.float()


def planned(fixture):
    plan = yaml.safe_load((GOLDEN / f"{fixture}.yaml").read_text())
    return sorted((b["module"], b["layer"]) for lp in plan["layers"] for b in lp.get("bindings") or ())


def errors(out, ref):
    m = metrics.compute(out, ref)
    lp, lq = torch.log_softmax(ref.double(), -1), torch.log_softmax(out.double(), -1)
    kl = float((lp.exp() * (lp - lq)).sum(-1).mean())
    top1 = float((out.argmax(-1) == ref.argmax(-1)).double().mean())
    return m, kl, top1


# transformers' memo of whether a model class's source lets set_attn_implementation switch it
# (modeling_utils.py _can_set_attn_implementation, 5.17): set by that call on any model, kernelized
# or not, and a property of the class's code, not of a model's behaviour.
_MEMOS = ("_can_set_attn_implementation_cached_value",)


def stock_snapshot(fixture):
    """A stock model's output and every class's own attributes, to compare before and after."""
    model = build(fixture)
    classes = {type(m) for m in model.modules()}
    attrs = {c: {k: v for k, v in c.__dict__.items() if k not in _MEMOS} for c in classes}
    return run(model, inputs(fixture)), attrs, model


class _Picks:
    """The experts each MoE block's router picks per token, in the oracle and the two bf16 models,
    each from its own block input and scored with the oracle's fp32 router."""

    def __init__(self, models):
        self.inputs = {}
        layers = lambda m: getattr(getattr(m, "model", None), "layers", None) or []  # noqa: E731
        # the sparse block: `mlp`, or GraniteMoE's `block_sparse_moe` (its router is `router`)
        sparse = lambda layer: next((b for b in (getattr(layer, n, None) for n in ("mlp", "block_sparse_moe"))  # noqa: E731
                                     if hasattr(b, "experts")), None)
        for n, m in models.items():
            for i, layer in enumerate(layers(m)):
                if sparse(layer) is not None:
                    sparse(layer).register_forward_hook(
                        lambda mod, a, out, n=n, i=i: self.inputs.__setitem__((n, i), a[0].detach().float()))
        self.routers = {i: getattr(sparse(layer), "gate", None) or sparse(layer).router
                        for i, layer in enumerate(layers(models["oracle"])) if sparse(layer) is not None}

    def __bool__(self):
        return bool(self.routers)

    def agree(self):
        ok = None
        for i, gate in self.routers.items():
            def top(n):
                h = self.inputs[(n, i)]
                return torch.topk(h @ gate.weight.float().t(), gate.top_k, dim=-1).indices.sort(-1).values
            o = top("oracle")
            both = (top("stock") == o).all(-1) & (top("kernels") == o).all(-1)
            ok = both if ok is None else ok & both
        # causal attention carries a swap to every later position of its sequence
        return torch.cummin(ok.int(), dim=-1).values.bool()


def moe_picks(oracle, stock, model):
    return _Picks({"oracle": oracle, "stock": stock, "kernels": model})


@pytest.mark.parametrize("fixture", ALL)
def test_package_alone_kernelizes_every_architecture(pkg, fixture, device):
    before, class_dicts, _ = stock_snapshot(fixture)
    oracle, stock, model = build(fixture, torch.float32, device), build(fixture, device=device), build(fixture, device=device)
    launches = dict(pkg._backend.launch_counts)
    # (module, layer class) kernelize binds; two classes may share a forward (FusedAttention is
    # Attention over Phi-3's fused qkv_proj), so the class is what supported_bindings names
    got = sorted(pkg.supported_bindings(model))
    summary = pkg.kernelize(model)
    assert summary["path"] == "kernels"  # through kernels.kernelize, the real library
    assert sorted(summary["replaced_modules"]) == [p for p, _ in got]
    for p, layer in got:
        assert model.get_submodule(p).forward.__func__ is getattr(pkg.layers, layer).forward, p
    assert got == planned(fixture), f"kernelized {got}\nplanned {planned(fixture)}"
    assert not any(p not in summary["replaced_modules"] for p, m in model.named_modules() if "forward" in m.__dict__)

    x = inputs(fixture)
    picks = moe_picks(oracle, stock, model)
    ref, st, out = run(oracle, x), run(stock, x), run(model, x)
    assert sum(pkg._backend.launch_counts.values()) > sum(launches.values())  # our kernels ran
    assert not torch.equal(out, st)
    if picks:
        # An MoE block sends a token to other experts than the fp32 model's wherever two scores are
        # closer than bf16 activations resolve; stock and the kernels do so about equally often
        # (equal counts over 12 inputs of these fixtures), each at their own tokens, and one
        # swapped expert outweighs all other rounding. Both are measured up to the first swap of
        # either in each sequence.
        keep = picks.agree()
        assert keep.float().mean() >= 0.5, keep
        ref, st, out = ref[keep], st[keep], out[keep]
    m_out, kl_out, top_out = errors(out, ref)
    m_st, kl_st, top_st = errors(st, ref)
    print(f"{fixture}: kernelized {m_out.line()} kl={kl_out:.3e} top1={top_out:.3f}; stock {m_st.line()} kl={kl_st:.3e}")
    assert m_out.nonfinite == 0 and m_out.cosine >= 0.999, m_out.line()
    assert m_out.mean_abs <= 1.5 * m_st.mean_abs + 1e-9, (m_out.line(), m_st.line())
    assert m_out.mean_rel <= 1.5 * m_st.mean_rel + 1e-9, (m_out.line(), m_st.line())
    assert kl_out <= 1.5 * kl_st + 1e-9, (kl_out, kl_st)
    assert top_out >= top_st - 0.05

    # nothing leaked: a stock model built now is the stock model of before, bit for bit
    after, class_dicts_after, fresh = stock_snapshot(fixture)
    assert torch.equal(after, before)
    assert class_dicts_after == class_dicts
    assert not any("forward" in m.__dict__ for m in fresh.modules())


def test_kernelize_restores_the_classes_kernel_marks(pkg, device):
    """transformers marks its RMSNorm classes for kernels when it supports the installed kernels
    version (kernel_layer_name "RMSNorm", via kernels.replace_kernel_forward_from_hub); kernelize
    sets its own marks only for the call and puts back what was there, marked or not. It also
    leaves the shared rotary function objects transformers attaches to attention modules alone."""
    from kernels import replace_kernel_forward_from_hub, use_kernel_forward_from_hub
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, apply_rotary_pos_emb

    added = "kernel_layer_name" not in LlamaRMSNorm.__dict__
    if added:  # this transformers does not take the installed kernels: mark it as it would
        replace_kernel_forward_from_hub(LlamaRMSNorm, "RMSNorm")
    try:
        name, cond = LlamaRMSNorm.__dict__["kernel_layer_name"], LlamaRMSNorm.__dict__["kernel_condition"]
        model = build("llama-odd", device=device)
        funcs = [f for m in model.modules() for f in getattr(m, "_kernel_funcs", {}).values()]
        if not funcs:  # attached as transformers' use_kernelized_func does when it takes kernels
            funcs = [use_kernel_forward_from_hub("rotary_pos_emb")(apply_rotary_pos_emb)]
            for layer in model.model.layers:
                layer.self_attn.__dict__["_kernel_funcs"] = {"apply_rotary_pos_emb": funcs[0]}
        summary = pkg.kernelize(model)
        assert summary["replaced"]["RMSNorm"] == 3
        assert LlamaRMSNorm.__dict__["kernel_layer_name"] == name and LlamaRMSNorm.__dict__["kernel_condition"] is cond
        assert "kernel_layer_name" not in LlamaMLP.__dict__ and "kernel_condition" not in LlamaMLP.__dict__
        assert not any("forward" in f.__dict__ for f in funcs)
    finally:
        if added:
            del LlamaRMSNorm.kernel_layer_name, LlamaRMSNorm.kernel_condition


def test_kernelize_without_the_kernels_package_binds_the_same(pkg, device):
    a, b = build("qwen3-tiny", device=device), build("qwen3-tiny", device=device)
    sa, sb = pkg.kernelize(a), pkg.kernelize(b, use_kernels=False)
    assert sb["path"] == "direct" and sa["replaced_modules"] == sb["replaced_modules"]
    x = inputs("qwen3-tiny")
    assert torch.equal(run(a, x), run(b, x))


def test_kernelize_with_a_kernels_folder_that_is_not_the_package(pkg, device, monkeypatch, tmp_path):
    """A folder named kernels on sys.path (a checkout's) imports as an empty namespace: "auto"
    binds directly, as without the package; use_kernels=True says which `kernels` it found."""
    import sys
    import types

    fake = types.ModuleType("kernels")
    fake.__path__ = [str(tmp_path / "kernels")]
    monkeypatch.setitem(sys.modules, "kernels", fake)
    model = build("qwen3-tiny", device=device)
    assert pkg.kernelize(model)["path"] == "direct"
    with pytest.raises(pkg.InjectError, match=r"the `kernels` importable here \(\[.*kernels'\]\) is not Hugging Face"):
        pkg.kernelize(build("qwen3-tiny", device=device), use_kernels=True)


def test_kernelize_keeps_what_the_kernels_cannot_take(pkg, device):
    """llama-tiny's head_dim 16 is not an attention kernel's: its attention stays stock (as the
    plan keeps it), with the reason the planner gives."""
    model = build("llama-tiny", device=device)
    bound = dict(pkg.supported_bindings(model))
    assert "model.layers.0.self_attn" not in bound and bound["model.layers.0.mlp"] == "SwiGLUMLP"
    assert pkg.injection._why_not(model.model.layers[0].self_attn, "Attention").startswith("head_dim 16 not supported")
    pkg.kernelize(model)
    with pytest.raises(pkg.InjectError, match="already has its forward replaced"):
        pkg.kernelize(model)
