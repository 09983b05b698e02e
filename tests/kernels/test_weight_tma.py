"""Decode GEMVs with their weight tiles loaded through host-side tensor descriptors (the
XPUINJECT_WEIGHT_TMA switch; TMA bulk copies on sm_90+) or through block pointers (the
XPUINJECT_WEIGHT_BLOCK switch; XPU's 2D block loads), both run by the interpreter on the CPU: the
same bits as the pointer loads they replace, for the dense GEMV's epilogues, the QKV GEMV with RoPE
and the cache write, and the MoE decode launches; shapes a descriptor cannot take fall back to
pointer loads."""

from __future__ import annotations

import pytest
import torch
import triton

from xpuinject_kernels import _backend, gemv, moe, rope_cache
from test_rope_cache import norm_case


@pytest.fixture(params=["tma", "block_ptr"])
def tma(request, monkeypatch, device):
    """A function that runs fn with one tile path's switch on or off (the other's off) and reports
    how many launches of `counter` ran; a counter named "...tma" counts the path under test's."""
    path = request.param
    if path == "tma" and device == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor descriptors need sm_90 or later")
    if path == "tma" and device == "xpu":
        pytest.skip("descriptors are a CUDA switch: XPU reads its tiles through block pointers")

    def run(on, fn, counter):
        monkeypatch.setattr(_backend, "WEIGHT_TMA", on if path == "tma" else False)
        monkeypatch.setattr(_backend, "WEIGHT_BLOCK", on if path == "block_ptr" else False)
        counter = counter.replace("tma", path)
        before = _backend.launch_counts[counter]
        out = fn()
        return out, _backend.launch_counts[counter] - before

    run.path = path
    return run


def cfg(block_n, block_k, split, stages=2):
    return triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split}, num_warps=4,
                         num_stages=stages)


@pytest.mark.parametrize("epilogue", ["none", "bias", "residual", "swiglu"])
@pytest.mark.parametrize("m,k,n_w,block_n,split", [
    (1, 200, 80, 32, 3),   # K not a multiple of the split: the last split's rows run past K
    (3, 130, 48, 64, 4),   # one N tile wider than N
    (16, 72, 32, 16, 1),   # the dot's full 16 rows
])
def test_gemv_through_descriptors_gives_the_pointer_loads_bits(device, tma, epilogue, m, k, n_w, block_n, split):
    g = torch.Generator().manual_seed(m * 1000 + k)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(device)
    w = (torch.randn(k, n_w, generator=g) * k ** -0.5).to(torch.bfloat16).to(device)
    b = (torch.randn(n_w, generator=g) * 0.3).to(torch.bfloat16).to(device) if epilogue == "bias" else None
    n = n_w // 2 if epilogue == "swiglu" else n_w
    r = torch.randn(m, n, generator=g).to(torch.bfloat16).to(device) if epilogue == "residual" else None
    c = cfg(block_n, 32, split)

    def call():
        return gemv.gemv(x, w, b, r, _backend.empty((m, n), x.dtype, x.device), epilogue, c)

    want, ran = tma(False, call, "gemv.tma")
    assert ran == 0
    got, ran = tma(True, call, "gemv.tma")
    assert ran == 1, "the launch did not take the descriptor path"
    assert torch.equal(got, want), float((got.float() - want.float()).abs().max())


def test_a_class_whose_config_says_ptr_keeps_the_pointer_loads(device, tma):
    """A tuned config's PTR=1 (gemv.CONFIG_FLAGS) keeps a class on pointer loads where the device's
    default is descriptors or block pointers: same bits, no such launch counted."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 96, generator=g).to(torch.bfloat16).to(device)
    w = (torch.randn(96, 64, generator=g) * 0.1).to(torch.bfloat16).to(device)

    def call(extra):
        c = triton.Config({"BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2, **extra}, num_warps=4, num_stages=2)
        return gemv.gemv(x, w, None, None, _backend.empty((1, 64), x.dtype, x.device), "none", c)

    want, ran = tma(True, lambda: call({}), "gemv.tma")
    assert ran == 1
    got, ran = tma(True, lambda: call({"PTR": 1}), "gemv.tma")
    assert ran == 0 and torch.equal(got, want)


@pytest.mark.parametrize("n_w,epilogue", [(34, "none"), (44, "swiglu")])
def test_gemv_falls_back_where_a_descriptor_cannot_start(device, tma, n_w, epilogue):
    """Rows of 68 bytes are not 16-byte aligned; an up half 22 columns on starts at 44 bytes: both
    keep the pointer loads under descriptors, with the same result; block pointers read them."""
    g = torch.Generator().manual_seed(n_w)
    x = torch.randn(1, 64, generator=g).to(torch.bfloat16).to(device)
    w = (torch.randn(64, n_w, generator=g) * 0.125).to(torch.bfloat16).to(device)
    n = n_w // 2 if epilogue == "swiglu" else n_w

    def call():
        return gemv.gemv(x, w, None, None, _backend.empty((1, n), x.dtype, x.device), epilogue, cfg(16, 32, 2))

    want, _ = tma(False, call, "gemv.tma")
    got, ran = tma(True, call, "gemv.tma")
    # block pointers take any start: only descriptors fall back
    assert ran == (tma.path == "block_ptr") and torch.equal(got, want)


@pytest.mark.parametrize("b,hq,hk,d,split", [(1, 6, 2, 128, 4), (2, 10, 2, 80, 1), (1, 9, 3, 96, 2)])
def test_qkv_rope_gemv_through_descriptors_gives_the_same_cache(device, tma, monkeypatch, b, hq, hk, d, split):
    """A head a tile (head_dim 80 and 96 in a wider power-of-two tile that reads into the next
    head): q_rot and both caches as with pointer loads, bit for bit."""
    dtype, hidden, length, start = torch.bfloat16, 160, 9, 3
    torch.manual_seed(d)
    n = (hq + 2 * hk) * d
    x = (torch.randn(b, 1, hidden) * 2).to(dtype).to(device)
    w = (torch.randn(hidden, n) / hidden ** 0.5).to(dtype).to(device)
    _, _, _, cos, sin, kc, vc = norm_case(b, 1, hq, hk, d, None, length, dtype, device, seed=d)
    c = cfg(triton.next_power_of_2(d), 32, split, stages=1)
    monkeypatch.setattr(gemv, "launch_config", lambda *a, **k: c)

    def call():
        kc_, vc_, counter = kc.clone(), vc.clone(), torch.tensor(start, device=device)
        q = rope_cache.qkv_rope_cache_write(x, w, None, cos, sin, kc_, vc_, counter, hq)
        return q, kc_, vc_

    want, ran = tma(False, call, "gemv.tma")
    assert ran == 0
    got, ran = tma(True, call, "gemv.tma")
    assert ran == 1
    for name, a, e in zip(("q_rot", "k_cache", "v_cache"), got, want):
        assert torch.equal(a, e), name


DECODE_CFG = dict(BLOCK_N=16, BLOCK_K=32, SPLIT_K=2, DOWN_BLOCK_N=32, DOWN_BLOCK_K=16, DOWN_SPLIT_K=2, num_warps=4,
                  num_stages=2)


@pytest.mark.parametrize("tokens,top_k,h,i,launches", [
    (1, 2, 64, 24, 2),  # both launches through descriptors
    (3, 3, 80, 40, 2),
    (2, 2, 64, 20, 1),  # gate/up's up half 40 bytes on: only the down launch takes descriptors
])
def test_moe_decode_through_descriptors_gives_the_pointer_loads_bits(device, tma, tokens, top_k, h, i, launches):
    g = torch.Generator().manual_seed(h + i)
    router = (torch.randn(h, 6, generator=g) * 0.3).to(torch.bfloat16).to(device)
    gate_up = (torch.randn(6, h, 2 * i, generator=g) / h ** 0.5).to(torch.bfloat16).to(device)
    down = (torch.randn(6, i, h, generator=g) / i ** 0.5).to(torch.bfloat16).to(device)
    x = torch.randn(tokens, h, generator=g).to(torch.bfloat16).to(device)
    count = {}

    def call():
        before = {k: _backend.launch_counts[k] for k in ("moe.decode_tma", "moe.decode_block_ptr")}
        out = moe.moe(x, router, gate_up, down, top_k, "softmax-topk-norm", config=DECODE_CFG)
        count.update({k: _backend.launch_counts[k] - v for k, v in before.items()})
        return out

    want, ran = tma(False, call, "moe.decode")
    assert ran == 1 and count["moe.decode_tma"] == count["moe.decode_block_ptr"] == 0
    got, _ = tma(True, call, "moe.decode")
    # a gate/up that cannot start its up half's box keeps the pointer loads; block pointers take it
    assert count[f"moe.decode_{tma.path}"] == (2 if tma.path == "block_ptr" else launches)
    assert torch.equal(got, want), float((got.float() - want.float()).abs().max())


def test_weight_descriptor_and_the_boxes_it_takes():
    w = torch.randn(64, 48, dtype=torch.bfloat16)
    d = _backend.weight_desc(w, (32, 16))
    assert d.base is w and list(d.shape) == [64, 48] and list(d.strides) == [48, 1] and d.block_shape == [32, 16]
    assert d.padding == "zero"  # the rows and columns past the weight load as zeros
    assert _backend.tma_box_ok(w, (32, 16)) and not _backend.tma_box_ok(w, (512, 16))
    assert not _backend.tma_box_ok(w, (32, 4))  # a box row of 8 bytes
    assert not _backend.tma_box_ok(w[:, 1:], (32, 16))  # a base off 16 bytes
    assert not _backend.tma_box_ok(torch.randn(64, 36, dtype=torch.bfloat16), (32, 16))  # rows of 72 bytes
    assert _backend.tma_box_ok(w, (32, 16), (24,)) and not _backend.tma_box_ok(w, (32, 16), (20,))  # 40 bytes on


def test_descriptor_variants_compile_for_hopper():
    """The interpreter runs descriptors and block pointers as plain indexing: the GEMV's and the
    MoE decode launches' descriptor variants (TMA copies, pipelined at the launch's stages) and
    block-pointer variants compile offline for sm_90 through scripts/cuda_compile_check.py."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(root / "kernels" / "python"))
    only = "|".join(["gemv none split4, weight", "gemv swiglu split2, weight", "gemv residual split1, weight",
                     "moe decode gate/up split1, weight", "moe decode down split2 + residual, weight"])
    p = subprocess.run([sys.executable, str(root / "scripts" / "cuda_compile_check.py"), "--only", only],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0 and "10 passed, 0 failed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


def test_block_pointers_are_xpus_default_and_the_switch_overrides_it(monkeypatch):
    """XPU reads its decode weight tiles through block pointers unless XPUINJECT_WEIGHT_BLOCK=0;
    CUDA and the CPU only when the switch asks; the interpreter runs them only when asked."""
    xpu, cuda, cpu = torch.device("xpu"), torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    monkeypatch.setattr(_backend, "WEIGHT_BLOCK", None)
    assert _backend.weight_block_ptr(xpu) and not _backend.weight_block_ptr(cuda)
    assert not _backend.weight_block_ptr(cpu)
    monkeypatch.setattr(_backend, "WEIGHT_BLOCK", False)
    assert not _backend.weight_block_ptr(xpu)
    monkeypatch.setattr(_backend, "WEIGHT_BLOCK", True)
    assert _backend.weight_block_ptr(cuda) and _backend.weight_block_ptr(xpu)
    monkeypatch.setattr(_backend, "is_interpret", lambda: True)
    monkeypatch.setattr(_backend, "WEIGHT_BLOCK", None)
    assert not _backend.weight_block_ptr(xpu)
