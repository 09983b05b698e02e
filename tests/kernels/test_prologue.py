"""A decode step's inputs in one launch (prologue.py) against the torch ops the runtime otherwise
runs, and the runtime with it against the runtime without it on every decoder fixture."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from xpuinject_kernels import _backend
from xpuinject_kernels import runtime as rt
from xpuinject_kernels.prologue import BLOCK, step_prologue

FIXTURES = Path(__file__).resolve().parent.parent.parent / "testdata" / "fixtures"


def state(b=3, s=BLOCK + 77, cur=BLOCK + 40, seed=0):
    g = torch.Generator().manual_seed(seed)
    key_valid = torch.rand(b, s, generator=g) > 0.2
    pos_offset = torch.randint(0, 30, (b,), generator=g)
    return torch.tensor(cur), pos_offset, key_valid


@pytest.mark.parametrize("mask_dtype, window", [(torch.bool, None), (torch.bfloat16, 64), (torch.float32, None),
                                                (torch.bool, 300)])
def test_step_prologue_equals_the_torch_ops(device, mask_dtype, window):
    cur, pos_offset, key_valid = state()
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(50, BLOCK + 300, generator=g).to(torch.bfloat16)
    tok = torch.randint(0, 50, (3, 1), generator=g)
    cos_t, sin_t = torch.randn(2, key_valid.shape[1], 96, generator=g).to(torch.bfloat16)
    got = step_prologue(cur.to(device), pos_offset.to(device), key_valid.to(device), tok=tok.to(device),
                        weight=weight.to(device), tables=(cos_t.to(device), sin_t.to(device)), window=window,
                        mask_dtype=mask_dtype)
    # runtime._masks and _decode_step's torch path
    arange = torch.arange(key_valid.shape[1])
    full = ((arange <= cur) & key_valid)[:, None, None, :]
    pos = (cur - pos_offset)[:, None]
    want = {"mask": full, "pos": pos, "embeds": weight[tok], "cos": cos_t[pos], "sin": sin_t[pos]}
    if window is not None:
        want["sliding_mask"] = full & (arange > cur - window)[None, None, None, :]
    if mask_dtype != torch.bool:
        lo = torch.tensor(torch.finfo(mask_dtype).min, dtype=mask_dtype)
        for k in ("mask", "sliding_mask"):
            if k in want:
                want[k] = torch.where(want[k], torch.zeros((), dtype=mask_dtype), lo)
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and torch.equal(got[k].cpu(), v), k
    assert not torch.equal(want["mask"], want["mask"][:, :, :, torch.randperm(key_valid.shape[1])])


def test_step_prologue_without_embedding_or_tables(device):
    cur, pos_offset, key_valid = state(b=2, s=40, cur=17)
    got = step_prologue(cur.to(device), pos_offset.to(device), key_valid.to(device))
    assert set(got) == {"mask", "pos"}
    assert torch.equal(got["pos"].cpu(), (17 - pos_offset)[:, None])
    assert torch.equal(got["mask"].cpu()[:, 0, 0], (torch.arange(40) <= 17) & key_valid)


def test_step_prologue_refuses_what_it_cannot_read():
    cur, pos_offset, key_valid = state(b=2, s=40, cur=17)
    with pytest.raises(ValueError, match="int64"):
        step_prologue(cur.int(), pos_offset, key_valid)
    with pytest.raises(ValueError, match=r"pos_offset \[2\]"):
        step_prologue(cur, pos_offset[:1], key_valid)
    with pytest.raises(ValueError, match="tok and weight go together"):
        step_prologue(cur, pos_offset, key_valid, tok=torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="row-major"):
        step_prologue(cur, pos_offset, key_valid, tok=torch.zeros(2, 1, dtype=torch.long),
                      weight=torch.zeros(8, 5).t())


DECODERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file() and p.name != "levit-tiny")


@pytest.mark.parametrize("name", DECODERS)
def test_runtime_steps_equal_with_and_without_the_prologue(name, device, monkeypatch):
    """Every decoder fixture, a left-padded batch: the same tokens and the same two best scores at
    every step with the prologue's launch as with the torch ops, and the launch ran; on a GPU the
    captured steps too."""
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.bfloat16).eval().to(device)
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    runs = []
    for switch, graphs in (("0", False), ("1", False)) + ((("1", True),) if device != "cpu" else ()):
        monkeypatch.setenv("XPUINJECT_FUSE_PROLOGUE", switch)
        r = rt.Runtime(model, graphs=graphs, trace=True)
        before = _backend.launch_counts["step_prologue"]
        out = r.generate(ids, mask, max_new_tokens=6, max_cache_len=20)
        runs.append((out, r.last_trace, _backend.launch_counts["step_prologue"] - before, r.stats["replays"]))
    (out0, tr0, n0, _), *fused = runs
    assert n0 == 0
    for i, (out1, tr1, n1, replays) in enumerate(fused):
        # captured: the launches of the warm-ups and the capture, each replay none
        assert (n1 == 5) if i == 0 else (n1 >= 1 and replays == 5), (i, n1, replays)
        assert torch.equal(out0, out1)
        assert torch.equal(tr0["values"], tr1["values"]) and torch.equal(tr0["indices"], tr1["indices"])
