"""RoPE + static-cache write against an fp64 reference, and decode attention reading the length
from a cache counter on the device: GQA ratios 1, 4 and 7, head_dim 64 and 128, bf16 and fp16,
cache lengths that are not a multiple of the block, a write at the cache's last slot and past it.
With the per-head q/k RMSNorm fused in (both rounding orders): bit for bit the norm kernel followed
by the write, at head_dim 80, 96 and 128, GQA 3 and 5, partial rotary, and against fp64."""

import math

import pytest
import torch

import metrics
from xpuinject_kernels import _backend, attention, rope_cache
from test_rope import rotary

ULP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}


def projections(b, s, hq, hk, d, dtype, device):
    """q, k, v as the strided views of one fused projection a decoder layer makes."""
    qkv = torch.randn(b, s, (hq + 2 * hk) * d).to(dtype).to(device)
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    return q.view(b, s, hq, d), k.view(b, s, hk, d), v.view(b, s, hk, d)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,s,hq,hk,d,start,length", [
    (1, 1, 4, 4, 64, 37, 53),     # MHA (ratio 1), one decode token
    (2, 1, 8, 2, 128, 52, 53),    # ratio 4, the cache's last slot
    (2, 5, 7, 1, 64, 3, 21),      # ratio 7, a 5-token prefill mid-cache
    (1, 3, 7, 1, 128, 19, 21),    # two of three slots past the end: dropped, nothing else touched
])
def test_rope_cache_write_matches_reference(device, dtype, b, s, hq, hk, d, start, length):
    q, k, v = projections(b, s, hq, hk, d, dtype, device)
    cos, sin = rotary(d, s, b, dtype, device)
    kc = torch.randn(b, hk, length, d).to(dtype).to(device)
    vc = torch.randn(b, hk, length, d).to(dtype).to(device)
    counter = torch.tensor(start, device=device)
    want_q, want_k, want_v = rope_cache.rope_cache_write_ref(q, k, v, cos, sin, kc, vc, counter)
    kc0, vc0 = kc.clone(), vc.clone()

    got = rope_cache.rope_cache_write(q, k, v, cos, sin, kc, vc, counter)

    assert tuple(got.shape) == (b, hq, s, d)
    assert int(counter) == start, "the kernel must leave the counter to its caller"
    ulp = ULP[dtype]
    metrics.assert_close("q_rot", got, want_q, atol=1e-6, rtol=ulp)
    metrics.assert_close("k_cache", kc, want_k, atol=1e-6, rtol=ulp)
    # v is copied, not computed: bit-exact, and so is every slot the call must not write
    assert torch.equal(vc, want_v.to(dtype))
    written = torch.zeros(length, dtype=torch.bool)
    written[start:min(start + s, length)] = True
    assert torch.equal(kc[:, :, ~written], kc0[:, :, ~written])
    assert torch.equal(vc[:, :, ~written], vc0[:, :, ~written])


def test_rope_cache_write_refuses_mismatched_cache(device):
    q, k, v = projections(1, 1, 4, 2, 64, torch.bfloat16, device)
    cos, sin = rotary(64, 1, 1, torch.bfloat16, device)
    kc = torch.zeros(1, 4, 16, 64, dtype=torch.bfloat16, device=device)  # 4 heads, k has 2
    with pytest.raises(ValueError, match=r"k_cache shape \(1, 4, 16, 64\).*kv_heads 2"):
        rope_cache.rope_cache_write(q, k, v, cos, sin, kc, kc.clone(), torch.tensor(0, device=device))
    kc = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="counter must be a one-element int32/int64 tensor"):
        rope_cache.rope_cache_write(q, k, v, cos, sin, kc, kc.clone(), torch.tensor(0.0, device=device))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,hq,hk,d,length,cache_len", [
    (1, 4, 4, 64, 37, 64),
    (3, 8, 2, 128, 53, 96),
    (2, 7, 1, 64, 90, 128),
])
def test_decode_reads_only_up_to_counter(device, dtype, b, hq, hk, d, length, cache_len):
    """A 0-d length (the cache counter) bounds every row; slots past it hold NaN, which would
    poison the output if any were read."""
    q = torch.randn(b, hq, 1, d).to(dtype).to(device)
    k = torch.randn(b, hk, cache_len, d).to(dtype)
    v = torch.randn(b, hk, cache_len, d).to(dtype)
    k[:, :, length:] = float("nan")
    v[:, :, length:] = float("nan")
    k, v = k.to(device), v.to(device)
    counter = torch.tensor(length, device=device)
    pad = torch.ones(b, cache_len, dtype=torch.bool)
    pad[-1, :5] = False  # left padding on one row
    mask = pad[:, None, None, :].to(device)
    got = attention.decode_attention(q, k, v, scaling=1 / math.sqrt(d), kv_lens=counter, key_mask=mask, num_splits=4)
    ref = attention.attention_ref(q, k[:, :, :length], v[:, :, :length], causal=False,
                                  key_mask=pad[:, :length].to(device), dtype=torch.float64)
    assert torch.isfinite(got.float()).all()
    metrics.assert_close("decode vs fp64", got, ref, atol=2e-3, rtol=2 * ULP[dtype], min_cosine=0.9999)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("s,hq,hk,d,factor,start", [
    (1, 6, 2, 128, 0.75, 40),  # Phi-4-mini's 96 of 128, GQA 3, a decode token
    (5, 3, 1, 80, 0.6, 2),     # 48 of 80, a prefill mid-cache
])
def test_rope_cache_write_partial_rotary(device, dtype, s, hq, hk, d, factor, start):
    from test_rope import phi3_rotary

    b, length = 2, 47
    q, k, v = projections(b, s, hq, hk, d, dtype, device)
    cos, sin = phi3_rotary(d, factor, s, b, dtype, device)
    rd = cos.shape[-1]
    kc = torch.randn(b, hk, length, d).to(dtype).to(device)
    vc = torch.randn(b, hk, length, d).to(dtype).to(device)
    counter = torch.tensor(start, device=device)
    want_q, want_k, want_v = rope_cache.rope_cache_write_ref(q, k, v, cos, sin, kc, vc, counter)
    got = rope_cache.rope_cache_write(q, k, v, cos, sin, kc, vc, counter)
    ulp = ULP[dtype]
    metrics.assert_close("partial q_rot", got, want_q, atol=1e-6, rtol=ulp)
    metrics.assert_close("partial k_cache", kc, want_k, atol=1e-6, rtol=ulp)
    assert torch.equal(vc, want_v.to(dtype))
    # the channels past rotary_dim are k's own, bit for bit, in the written slots
    assert torch.equal(kc[:, :, start:start + s, rd:], k.transpose(1, 2)[..., rd:])
    assert torch.equal(got[..., rd:], q.transpose(1, 2)[..., rd:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rope_cache_write_without_rotary(device, dtype):
    """A NoPE layer's call (zero-width cos/sin): q comes back as it went in, and the written slots
    hold k and v bit for bit; the rest of the caches is untouched."""
    b, s, hq, hk, d, start, length = 2, 3, 6, 2, 80, 4, 9
    q, k, v = projections(b, s, hq, hk, d, dtype, device)
    cos, sin = rotary(d, s, b, dtype, device)
    kc = torch.randn(b, hk, length, d).to(dtype).to(device)
    vc = torch.randn(b, hk, length, d).to(dtype).to(device)
    kc0, vc0 = kc.clone(), vc.clone()
    got = rope_cache.rope_cache_write(q, k, v, cos[..., :0], sin[..., :0], kc, vc, torch.tensor(start, device=device))
    assert torch.equal(got, q.transpose(1, 2))
    assert torch.equal(kc[:, :, start:start + s], k.transpose(1, 2))
    assert torch.equal(vc[:, :, start:start + s], v.transpose(1, 2))
    rest = [i for i in range(length) if not start <= i < start + s]
    assert torch.equal(kc[:, :, rest], kc0[:, :, rest]) and torch.equal(vc[:, :, rest], vc0[:, :, rest])


def norm_weights(order, d, seed):
    """q_norm and k_norm weights as the fused kernel takes them: Llama's order the module's own
    bf16 weight (around 1, not 1), Gemma's the fp32 1 + w folded from a raw w around 0."""
    g = torch.Generator().manual_seed(seed)
    if order == "llama":
        return [(0.5 + torch.rand(d, generator=g)).to(torch.bfloat16) for _ in range(2)]
    return [1.0 + 0.3 * torch.randn(d, generator=g) for _ in range(2)]


def unfused_norm(order, x, w):
    from xpuinject_kernels import rmsnorm

    f = rmsnorm.rms_norm if order == "llama" else rmsnorm.rms_norm_gemma
    return f(x, w, NORM_EPS)


NORM_EPS = 1e-6
NORM_CASES = [  # b, s, hq, hk, d, rotary_factor (None: full), start, length
    (1, 1, 6, 2, 128, None, 5, 16),   # GQA 3, a decode token
    (2, 3, 10, 2, 80, None, 2, 9),    # GQA 5, head_dim 80, a prefill: q heads past one block of 8
    (2, 1, 9, 3, 96, 0.75, 7, 8),     # partial rotary (72 of 96), GQA 3, the cache's last slot
    (1, 3, 3, 1, 128, None, 6, 7),    # two of three slots past the end: dropped
    (2, 2, 6, 2, 64, 0, 3, 9),        # a NoPE layer (rotary_dim 0): normalized, nothing rotated
]


def norm_case(b, s, hq, hk, d, factor, length, dtype, device, seed=0):
    from test_rope import phi3_rotary

    torch.manual_seed(seed)
    qkv = (torch.randn(b, s, (hq + 2 * hk) * d) * 3 + 0.5).to(dtype).to(device)  # far from unit rms
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    q, k, v = q.view(b, s, hq, d), k.view(b, s, hk, d), v.view(b, s, hk, d)
    cos, sin = rotary(d, s, b, dtype, device) if factor is None else phi3_rotary(d, factor, s, b, dtype, device)
    if factor == 0:  # a NoPE layer's zero-width views
        cos, sin = cos[..., :0], sin[..., :0]
    kc = torch.randn(b, hk, length, d).to(dtype).to(device)
    vc = torch.randn(b, hk, length, d).to(dtype).to(device)
    return q, k, v, cos, sin, kc, vc


@pytest.mark.parametrize("order", ["llama", "gemma"])
@pytest.mark.parametrize("b,s,hq,hk,d,factor,start,length", NORM_CASES)
def test_fused_norm_equals_norm_then_rope_cache_write(device, order, b, s, hq, hk, d, factor, start, length):
    """q_norm / k_norm inside the kernel: q_rot and both caches bit for bit what our RMSNorm
    kernel (rms_norm, or rms_norm_gemma on the folded 1 + w) followed by rope_cache_write gives."""
    dtype = torch.bfloat16
    q, k, v, cos, sin, kc, vc = norm_case(b, s, hq, hk, d, factor, length, dtype, device)
    qw, kw = (w.to(device) for w in norm_weights(order, d, seed=1))
    counter = torch.tensor(start, device=device)
    kc_u, vc_u = kc.clone(), vc.clone()
    want = rope_cache.rope_cache_write(unfused_norm(order, q, qw), unfused_norm(order, k, kw), v, cos, sin, kc_u, vc_u,
                                       counter)

    got = rope_cache.rope_cache_write(q, k, v, cos, sin, kc, vc, counter, q_norm_weight=qw, k_norm_weight=kw,
                                      eps=NORM_EPS, norm_round=order == "llama")

    assert int(counter) == start
    assert tuple(got.shape) == (b, hq, s, d)
    assert torch.equal(got, want), float((got.float() - want.float()).abs().max())
    assert torch.equal(kc, kc_u), float((kc.float() - kc_u.float()).abs().max())
    assert torch.equal(vc, vc_u)
    # the other order is a different norm: the test would see a swapped rounding mode
    ow = torch.float32 if order == "llama" else dtype
    other = rope_cache.rope_cache_write(q, k, v, cos, sin, kc.clone(), vc.clone(), counter, q_norm_weight=qw.to(ow),
                                        k_norm_weight=kw.to(ow), eps=NORM_EPS, norm_round=order != "llama")
    assert not torch.equal(other, got)


@pytest.mark.parametrize("order", ["llama", "gemma"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,s,hq,hk,d,factor,start,length", NORM_CASES[:3])
def test_fused_norm_matches_reference(device, order, dtype, b, s, hq, hk, d, factor, start, length):
    """Against the fp64 norm + rope: the rope's relative tolerance, with an ulp of 1 absolute
    instead of 1e-6: the norm rounds its output (O(1) by construction) to the activation dtype
    before the rotation, an absolute error that cancellation in x1 c - x2 s does not shrink."""
    q, k, v, cos, sin, kc, vc = norm_case(b, s, hq, hk, d, factor, length, dtype, device, seed=2)
    qw, kw = (w.to(device) for w in norm_weights(order, d, seed=3))
    if order == "llama":
        qw, kw = qw.to(dtype), kw.to(dtype)
    counter = torch.tensor(start, device=device)
    want_q, want_k, want_v = rope_cache.rope_cache_write_ref(q, k, v, cos, sin, kc, vc, counter, q_norm_weight=qw,
                                                             k_norm_weight=kw, eps=NORM_EPS)
    got = rope_cache.rope_cache_write(q, k, v, cos, sin, kc, vc, counter, q_norm_weight=qw, k_norm_weight=kw,
                                      eps=NORM_EPS, norm_round=order == "llama")
    ulp = ULP[dtype]
    metrics.assert_close("normed q_rot", got, want_q, atol=ulp, rtol=ulp, min_cosine=0.9999)
    metrics.assert_close("normed k_cache", kc, want_k, atol=ulp, rtol=ulp, min_cosine=0.9999)
    assert torch.equal(vc, want_v.to(dtype))


@pytest.mark.parametrize("b,s,hq,hk,d,factor,start,length", NORM_CASES[:3])
def test_fused_norm_after_rope_equals_apply_rope(device, b, s, hq, hk, d, factor, start, length):
    """norm_after (HunYuan's order): q_rot and the cache's new keys bit for bit what apply_rope
    with the same norms gives (the same expressions), v copied, and not the before order's values."""
    from xpuinject_kernels import rope

    dtype = torch.bfloat16
    q, k, v, cos, sin, kc, vc = norm_case(b, s, hq, hk, d, factor, length, dtype, device, seed=4)
    qw, kw = (w.to(device) for w in norm_weights("llama", d, seed=5))
    nw = dict(q_norm_weight=qw, k_norm_weight=kw, eps=NORM_EPS)
    want_q, want_k = rope.apply_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin, norm_after=True, **nw)
    counter = torch.tensor(start, device=device)
    kc0 = kc.clone()
    got = rope_cache.rope_cache_write(q, k, v, cos, sin, kc, vc, counter, norm_after=True, **nw)
    assert torch.equal(got, want_q)
    n = min(s, length - start)
    assert torch.equal(kc[:, :, start:start + n], want_k[:, :, :n])
    assert torch.equal(vc[:, :, start:start + n], v.transpose(1, 2)[:, :, :n])
    assert torch.equal(kc[:, :, :start], kc0[:, :, :start])
    before = rope_cache.rope_cache_write(q, k, v, cos, sin, kc.clone(), vc.clone(), counter, **nw)
    assert not torch.equal(before, got)


def test_fused_norm_refuses_bad_weights(device):
    q, k, v = projections(1, 1, 4, 2, 64, torch.bfloat16, device)
    cos, sin = rotary(64, 1, 1, torch.bfloat16, device)
    kc = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16, device=device)
    w = torch.ones(64, dtype=torch.bfloat16, device=device)

    def call(qw, kw, **kw_args):
        return rope_cache.rope_cache_write(q, k, v, cos, sin, kc, kc.clone(), torch.tensor(0, device=device),
                                           q_norm_weight=qw, k_norm_weight=kw, **kw_args)

    with pytest.raises(ValueError, match="rope_cache_write: q_norm_weight and k_norm_weight go together"):
        call(w, None)
    with pytest.raises(ValueError, match=r"k_norm_weight shape \(32,\): want \[head_dim 64\]"):
        call(w, w[:32])
    with pytest.raises(ValueError, match=r"q_norm_weight shape \(1, 64\): want \[head_dim 64\]"):
        call(w[None], w)
    with pytest.raises(ValueError, match="q_norm_weight dtype torch.int64 not supported"):
        call(torch.ones(64, dtype=torch.int64, device=device), w)
    with pytest.raises(ValueError, match=r"k_norm_weight on meta, q on"):
        call(w, torch.ones(64, dtype=torch.bfloat16, device="meta"))
    # Llama's order multiplies in the weight's dtype: an fp32 weight would widen the output
    with pytest.raises(ValueError, match="q_norm_weight dtype torch.float32 would make the norm's output torch.float32"):
        call(w.float(), w)
    call(w.float(), w.float(), norm_round=False)  # Gemma's fp32 1 + w is what that order takes
    with pytest.raises(ValueError, match="eps must be >= 0, got -1.0"):
        call(w, w, eps=-1.0)


def test_fused_norm_traces_as_one_op(device):
    """torch.compile(fullgraph=True) over the op with the norm arguments: the traced call computes
    what the eager one does and writes the caches the same."""
    q, k, v, cos, sin, kc, vc = norm_case(1, 2, 6, 2, 64, None, 8, torch.bfloat16, device)
    qw, kw = (w.to(device) for w in norm_weights("llama", 64, seed=4))
    counter = torch.tensor(3, device=device)

    def f(q, k, v, kc, vc):
        return rope_cache.rope_cache_write(q, k, v, cos, sin, kc, vc, counter, q_norm_weight=qw, k_norm_weight=kw,
                                           eps=NORM_EPS)

    torch._dynamo.reset()
    kc_c, vc_c = kc.clone(), vc.clone()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, kc_c, vc_c)
    want = f(q, k, v, kc, vc)
    assert torch.equal(got, want) and torch.equal(kc_c, kc) and torch.equal(vc_c, vc)


def test_decode_variants_compile_for_hopper():
    """The interpreter runs none of the decode step's fused variants as a GPU compiles them (it
    takes what Triton's code generator refuses, e.g. a branch that reshapes a name from outside
    it): the one-token router (with the add + RMSNorm before it, each as shipped, its weights read
    before the PDL wait and its top-k sorted, and in the chain form) and the attention's split reduce
    at four warps and at the one they launch with where launches overlap (PDL), the GEMV with the
    input RMSNorm, and the QKV GEMV with RoPE + cache write (with and without that norm, with
    the q/k norms after the rotation, and with its weight tiles through a descriptor or block
    pointers) compile
    offline for sm_90 through scripts/cuda_compile_check.py, at the configs its cases list."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(root / "kernels" / "python"))
    for only, n in (("moe router t16 split8 with its top-8 of one token", 6),
                    ("gemv none split1, input RMSNorm", 1), ("gemv none split4, input RMSNorm", 1),
                    ("gemv none split8, ", 5), ("gemv none split4, RoPE + cache write d256", 1),
                    ("attention decode reduce", 6)):
        p = subprocess.run([sys.executable, str(root / "scripts" / "cuda_compile_check.py"), "--only", only],
                           capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0 and f"{n} passed, 0 failed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


QKV_ROPE_CASES = [  # b, hq, hk, d, rotary_factor, norm order, bias, input norm in the GEMV, start, length, splits
    (1, 6, 2, 128, None, "llama", False, False, 5, 16, 4),   # GQA 3, qwen3's q/k norms, four K splits
    (2, 10, 2, 80, None, None, True, False, 2, 9, 1),        # GQA 5, head_dim 80 in a 128-wide tile, a bias
    (2, 9, 3, 96, 0.75, "gemma", False, True, 7, 8, 2),      # partial rotary, Gemma's norms, the last slot, input norm
    (1, 3, 1, 64, None, None, False, False, 7, 7, 3),        # the slot past the cache: nothing written
    (2, 6, 2, 64, 0, None, False, False, 1, 5, 2),           # a NoPE layer: the cache write alone
    (1, 4, 2, 80, 0, "llama", True, False, 0, 4, 1),         # NoPE with q/k norms, a bias, the first slot
    (2, 6, 2, 128, None, "llama-after", False, False, 3, 8, 2),  # HunYuan's q/k norms, after the rotation
    (1, 9, 3, 96, 0.75, "llama-after", True, True, 0, 4, 4),     # the same with partial rotary and an input norm
]


@pytest.mark.parametrize("layout", ["kmajor", "kmajor-ew", "nmajor"])
@pytest.mark.parametrize("b,hq,hk,d,factor,order,bias,in_norm,start,length,splits", QKV_ROPE_CASES)
def test_qkv_rope_cache_write_equals_the_gemv_then_rope_cache_write(monkeypatch, device, b, hq, hk, d, factor, order,
                                                                    bias, in_norm, start, length, splits, layout):
    """The QKV GEMV with RoPE, the q/k norms and the cache write in its epilogue: q_rot and both
    caches as the GEMV at the same config followed by rope_cache_write leave them (bit for bit
    under the interpreter; on a GPU, or with the norms after the rotation, the norm's sum may run in
    another order, one rounding apart),
    the counter untouched, and every other slot of the caches as it was; on a K-major weight (its
    config's EW switch off and on) and on the [K, N] view of an N-major one."""
    import importlib

    import triton
    from xpuinject_kernels import gemv

    gemm = importlib.import_module("xpuinject_kernels.gemm")  # the package exports a function so named
    dtype, hidden = torch.bfloat16, 160
    torch.manual_seed(11)
    n = (hq + 2 * hk) * d
    x = (torch.randn(b, 1, hidden) * 2).to(dtype).to(device)
    w = (torch.randn(hidden, n) / hidden ** 0.5).to(dtype).to(device)
    if layout == "nmajor":
        w = w.t().contiguous().t()
    bv = (torch.randn(n) * 0.1).to(dtype).to(device) if bias else None
    _, _, _, cos, sin, kc, vc = norm_case(b, 1, hq, hk, d, factor, length, dtype, device, seed=12)
    nw = {}
    after = order is not None and order.endswith("-after")
    if order is not None:
        qw, kw = (t.to(device) for t in norm_weights(order.removesuffix("-after"), d, seed=13))
        nw = dict(q_norm_weight=qw, k_norm_weight=kw, eps=NORM_EPS, norm_round=order != "gemma", norm_after=after)
    inw = (0.5 + torch.rand(hidden)).to(dtype).to(device) if in_norm else None
    # one row through EW: 16-column tiles, several a head, the epilogue in the program that finishes
    # a head's last one; else a head a tile
    narrow = layout != "kmajor" and b == 1
    cfg = triton.Config({"BLOCK_N": 16 if narrow else triton.next_power_of_2(d), "BLOCK_K": 32, "SPLIT_K": splits,
                         **({"EW": 1} if layout == "kmajor-ew" else {})}, num_warps=4, num_stages=1)
    monkeypatch.setattr(gemv, "launch_config", lambda *a, **k: cfg)
    monkeypatch.setattr(gemm, "FUSE_INPUT_NORM", True)  # the input norm inside the GEMV, as on an XPU

    qkv = torch.empty(b, n, dtype=dtype, device=device)
    row_norm = (inw, 1e-5) if in_norm else None
    gemv.gemv(x.view(b, hidden), w, bv, None, qkv, "bias" if bias else "none", config=cfg, row_norm=row_norm)
    q, k, v = qkv.view(b, 1, n).split([hq * d, hk * d, hk * d], dim=-1)
    c_u, kc_u, vc_u = torch.tensor(start, device=device), kc.clone(), vc.clone()
    want = rope_cache.rope_cache_write(q.view(b, 1, hq, d), k.view(b, 1, hk, d), v.view(b, 1, hk, d), cos, sin,
                                       kc_u, vc_u, c_u, **nw)

    c_f, kc_f, vc_f = torch.tensor(start, device=device), kc.clone(), vc.clone()
    before = _backend.launch_counts["gemv.rope_head_tiles"]
    got = rope_cache.qkv_rope_cache_write(x, w, bv, cos, sin, kc_f, vc_f, c_f, hq, **nw,
                                          **({"in_norm_weight": inw, "in_eps": 1e-5} if in_norm else {}))
    assert _backend.launch_counts["gemv.rope_head_tiles"] == before + narrow

    assert int(c_f) == start and tuple(got.shape) == (b, hq, 1, d)
    if str(device) == "cpu" and not after:
        assert torch.equal(got, want), float((got.float() - want.float()).abs().max())
        assert torch.equal(kc_f, kc_u) and torch.equal(vc_f, vc_u)
    else:  # a norm after the rotation sums its squares by halves in rope_cache_write, by rows here
        metrics.assert_close("q_rot", got, want, atol=0, rtol=ULP[dtype])
        metrics.assert_close("k_cache", kc_f, kc_u, atol=0, rtol=ULP[dtype])
        assert torch.equal(vc_f, vc_u)
    others = [i for i in range(length) if i != start]
    assert torch.equal(kc_f[:, :, others], kc[:, :, others]) and torch.equal(vc_f[:, :, others], vc[:, :, others])
    if start < length:  # the slot really was written
        assert not torch.equal(kc_f[:, :, start], kc[:, :, start]) and not torch.equal(vc_f[:, :, start], vc[:, :, start])


def test_qkv_rope_cache_write_refuses_bad_operands_and_traces_as_one_op(device):
    dtype = torch.bfloat16
    _, _, _, cos, sin, kc, vc = norm_case(1, 1, 4, 2, 64, None, 8, dtype, device, seed=3)
    x = torch.randn(1, 1, 96).to(dtype).to(device)
    w = (torch.randn(96, 8 * 64) / 10).to(dtype).to(device)
    counter = torch.tensor(3, device=device)
    with pytest.raises(ValueError, match=r"w shape \(96, 512\): want \[hidden 96, \(6 \+ 2\*2\) \* 64 = 640\]"):
        rope_cache.qkv_rope_cache_write(x, w, None, cos, sin, kc, vc, counter, 6)
    with pytest.raises(ValueError, match=r"takes x \[batch, 1, hidden\], got \(1, 2, 96\)"):
        rope_cache.qkv_rope_cache_write(x.expand(1, 2, 96), w, None, cos, sin, kc, vc, counter, 4)
    with pytest.raises(ValueError, match="5 query heads are not a multiple of 2 kv heads"):
        rope_cache.qkv_rope_cache_write(x, w, None, cos, sin, kc, vc, counter, 5)
    strided = torch.zeros(96, 2 * 8 * 64, dtype=dtype, device=device)[:, ::2]
    with pytest.raises(ValueError, match=r"strides \(1024, 2\), .*outside what the fused launch takes"):
        rope_cache.qkv_rope_cache_write(x, strided, None, cos, sin, kc, vc, counter, 4)

    def f(x, kc, vc):
        return rope_cache.qkv_rope_cache_write(x, w, None, cos, sin, kc, vc, counter, 4)

    torch._dynamo.reset()
    kc_c, vc_c = kc.clone(), vc.clone()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, kc_c, vc_c)
    want = f(x, kc, vc)
    assert torch.equal(got, want) and torch.equal(kc_c, kc) and torch.equal(vc_c, vc)
