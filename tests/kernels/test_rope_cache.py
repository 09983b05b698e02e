"""RoPE + static-cache write against an fp64 reference, and decode attention reading the length
from a cache counter on the device: GQA ratios 1, 4 and 7, head_dim 64 and 128, bf16 and fp16,
cache lengths that are not a multiple of the block, a write at the cache's last slot and past it."""

import math

import pytest
import torch

import metrics
from xpuinject_kernels import attention, rope_cache
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
