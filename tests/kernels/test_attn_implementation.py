"""An injected model that transformers loads with eager attention (Gemma 2: SDPA ignores its
logit soft-capping) moves to the package's own attention implementation, whose masks are
sdpa's: bool (True = attend), or None where causality needs none, which the attention kernels
read as they are. eager_mask instead builds an additive float copy with a scalar made on the host
(`torch.tensor(0.0, device=mask.device)`, masking_utils.py, transformers 5.17), a host-to-device
copy that a CUDA graph cannot capture. Stock models keep eager; the logits do not move.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
import transformers
from transformers import masking_utils
from transformers.masking_utils import AttentionMaskInterface

from xpuinject_kernels import decoder, inject, kernelize
from xpuinject_kernels.injection import ATTN_IMPLEMENTATION

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "testdata" / "fixtures"
GOLDEN = ROOT / "inject" / "plan" / "testdata" / "golden"


def load(name, attn="eager", device="cpu"):
    return transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.bfloat16,
                                                             attn_implementation=attn).eval().to(device)


def batch(device="cpu"):
    """Three prompts of 20 tokens (past both fixtures' 16-token window), two left-padded."""
    ids = torch.randint(3, 500, (3, 20), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    mask[2, :1] = 0
    return ids.to(device), mask.to(device)


def logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


class MaskCalls:
    """The mask builders transformers calls, by attention implementation, with what each returned
    (None or the dtype), and the masks the package's attention layers receive."""

    def __init__(self, monkeypatch):
        self.built, self.received = [], []
        mapping = AttentionMaskInterface._global_mapping
        for name in ("eager", "sdpa", ATTN_IMPLEMENTATION):
            if name in mapping:
                monkeypatch.setitem(mapping, name, self._spy(name, mapping[name]))
        block = decoder.attention_block

        def attention_block(module, hidden_states, position_embeddings, attention_mask, *args, **kwargs):
            self.received.append(None if attention_mask is None else attention_mask.dtype)
            return block(module, hidden_states, position_embeddings, attention_mask, *args, **kwargs)

        monkeypatch.setattr(decoder, "attention_block", attention_block)

    def _spy(self, name, fn):
        def spy(*args, **kwargs):
            out = fn(*args, **kwargs)
            self.built.append((name, None if out is None else out.dtype))
            return out
        return spy

    def take(self):
        built, received = self.built[:], self.received[:]
        self.built.clear()
        self.received.clear()
        return built, received


@pytest.mark.parametrize("name", ["gemma2-tiny", "gemma3-tiny"])
def test_injected_eager_model_takes_bool_masks(monkeypatch, name, device):
    """gemma2-tiny loads eager as the eval loads it; gemma3-tiny (no soft-capping) only when asked
    to, and then moves the same way. Layer 0 slides over a 16-token window: its mask is bool with
    the window in it, layer 1's (full, padded) bool too."""
    stock, model = load(name, device=device), load(name, device=device)
    summary = kernelize(model)
    assert summary["replaced"]["Attention"] == 2
    assert summary["attn_implementation"] == ATTN_IMPLEMENTATION == model.config._attn_implementation
    assert stock.config._attn_implementation == "eager"
    ids, mask = batch(device)

    calls = MaskCalls(monkeypatch)
    new = logits(model, ids, mask)
    built, received = calls.take()
    assert built == [(ATTN_IMPLEMENTATION, torch.bool)] * 2
    assert received == [torch.bool] * 2
    # without padding the full layer needs no mask (causal in the kernel); the sliding one, 20
    # tokens past its window, a bool one (built full first, run sliding first)
    logits(model, ids, None)
    assert calls.take() == ([(ATTN_IMPLEMENTATION, None), (ATTN_IMPLEMENTATION, torch.bool)],
                            [torch.bool, None])
    logits(stock, ids, mask)
    assert calls.take()[0] == [("eager", torch.bfloat16)] * 2

    # the same model on the additive masks it took before: the same logits, bit for bit
    model.set_attn_implementation("eager")
    old = logits(model, ids, mask)
    assert calls.take() == ([("eager", torch.bfloat16)] * 2, [torch.bfloat16] * 2)
    assert torch.equal(new, old)


def test_injected_gemma2_never_calls_eager_mask(monkeypatch, device):
    """Through `inject` with the planner's plan for the fixture (no packed weights)."""
    stock, model = load("gemma2-tiny", device=device), load("gemma2-tiny", device=device)
    summary = inject(model, plan=GOLDEN / "gemma2-tiny.yaml")
    assert summary["attn_implementation"] == ATTN_IMPLEMENTATION

    def refuse(*args, **kwargs):
        raise AssertionError("eager_mask called")

    monkeypatch.setitem(AttentionMaskInterface._global_mapping, "eager", refuse)
    ids, mask = batch(device)
    assert torch.isfinite(logits(model, ids, mask)).all()
    with pytest.raises(AssertionError, match="eager_mask called"):
        logits(stock, ids, mask)


def test_mask_path_makes_no_device_tensor_from_host_data(monkeypatch, device):
    """A CPU stand-in for CUDA-graph capture of the prefill forward (runtime.GraphedForward's
    `model(input_ids=ids, use_cache=False, logits_to_keep=1)`): transformers' mask code takes the
    branches it takes under stream capture (is_tracing(): no mask skipped, a packed-sequence check
    that stays on the device), and every torch.tensor(data, device=...) is recorded: on a GPU each
    is a host-to-device copy, which capture refuses. The stock model makes exactly eager_mask's two
    (one per layer type); the injected one none, anywhere in its forward."""
    monkeypatch.setattr(masking_utils, "is_tracing", lambda *a, **k: True)
    made = []
    tensor = torch.tensor

    def recording(*args, **kwargs):
        if kwargs.get("device") is not None:
            made.append(traceback.extract_stack(limit=2)[0])
        return tensor(*args, **kwargs)

    stock, model = load("gemma2-tiny", device=device), load("gemma2-tiny", device=device)
    kernelize(model)
    calls = MaskCalls(monkeypatch)
    ids = batch(device)[0]
    monkeypatch.setattr(torch, "tensor", recording)
    with torch.no_grad():
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
        got, built = list(made), calls.take()
        made.clear()
        stock(input_ids=ids, use_cache=False, logits_to_keep=1)
    monkeypatch.setattr(torch, "tensor", tensor)
    assert got == [], got
    # under capture both layers get a bool mask (causal, window, packed sequences in it)
    assert built == ([(ATTN_IMPLEMENTATION, torch.bool)] * 2, [torch.bool] * 2)
    assert [(Path(f.filename).name, f.name) for f in made] == [("masking_utils.py", "eager_mask")] * 2


def test_sdpa_models_and_models_with_stock_attention_keep_theirs(device):
    """gemma3-tiny loaded as the eval loads it stays sdpa (its masks are the same already);
    llama-tiny's head_dim 16 keeps its attention stock, which needs eager's masks: it stays eager."""
    model = load("gemma3-tiny", attn=None, device=device)
    assert kernelize(model)["attn_implementation"] == "sdpa" == model.config._attn_implementation
    model = load("llama-tiny", device=device)
    summary = kernelize(model)
    assert "Attention" not in summary["replaced"] and "model.layers.0.self_attn" not in summary["replaced_modules"]
    assert summary["attn_implementation"] == "eager" == model.config._attn_implementation


class CaptureStandIn:
    """runtime._Graphs on the CPU: warm-ups, then one forward with transformers' mask code in the
    branches it takes under stream capture (is_tracing() true: no mask skipped, a packed-sequence
    check kept on the device); replay() runs nothing."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch

    def pool(self):
        return None

    def capture(self, fn, pool, warmup):
        for _ in range(warmup):
            fn()
        with self.monkeypatch.context() as m:
            m.setattr(masking_utils, "is_tracing", lambda *a, **k: True)
            return type("Graph", (), {"replay": lambda self: None})(), fn()

    def synchronize(self):
        pass


def received_masks(monkeypatch):
    """The masks the package's attention layers receive (None or the dtype), in call order."""
    got = []
    block = decoder.attention_block

    def attention_block(module, hidden_states, position_embeddings, attention_mask, *args, **kwargs):
        got.append(None if attention_mask is None else attention_mask.dtype)
        return block(module, hidden_states, position_embeddings, attention_mask, *args, **kwargs)

    monkeypatch.setattr(decoder, "attention_block", attention_block)
    return got


@pytest.mark.slow(minutes=3)
@pytest.mark.parametrize("name,attn,masks", [
    ("qwen3-tiny", "sdpa", [None, None]),
    # layer 0 slides over 16 of the 20 tokens: transformers builds its mask in the warm-up too
    ("gemma2-tiny", "eager", [torch.bool, None]),
])
def test_graphed_forward_captures_the_masks_the_warmup_built(monkeypatch, name, attn, masks, device):
    """A forward of input ids alone: its captured attention layers get the masks transformers
    built in the eager warm-ups (no mask where the causal flag serves), not the materialized ones
    transformers builds under capture; the captured logits are the warm-ups', bit for bit. Inputs
    that carry a padding mask keep what transformers builds under capture."""
    from xpuinject_kernels import runtime

    model = load(name, attn, device)
    kernelize(model)
    got = received_masks(monkeypatch)
    ids, mask = batch(device)
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    assert got == masks
    padded = [torch.bool] * 2
    for inputs, warm, captured in ((dict(input_ids=ids, use_cache=False, logits_to_keep=1), masks, masks),
                                   (dict(input_ids=ids, attention_mask=mask, use_cache=False), padded, padded)):
        fwd = runtime.GraphedForward(model, graphs=False, warmup=2)
        fwd._g = CaptureStandIn(monkeypatch)
        got.clear()
        out = fwd(**inputs).logits
        assert got == warm * 2 + captured, got  # two warm-ups, then the capture
        if "attention_mask" not in inputs:
            assert torch.equal(out, want)
    # the stand-in is a real check: without the warm-up's decisions the capture gets bool masks
    got.clear()
    with monkeypatch.context() as m, torch.no_grad():
        m.setattr(masking_utils, "is_tracing", lambda *a, **k: True)
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
    assert got == [torch.bool] * 2
    # and transformers' mask builders are its own again
    assert "sdpa" not in masking_utils.ALL_MASK_ATTENTION_FUNCTIONS._local_mapping
    assert ATTN_IMPLEMENTATION not in masking_utils.ALL_MASK_ATTENTION_FUNCTIONS._local_mapping
