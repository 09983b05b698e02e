"""Attention kernels (flash prefill, split-K decode, transformers attention_forward) under
TRITON_INTERPRET=1 against

  (a) an fp64 explicit-softmax reference on the ORIGINAL (unrounded) inputs: the user's quality;
  (b) a bf16-mirroring oracle: the kernel's bf16 inputs, fp64 math, probabilities rounded to bf16
      before P@V, output rounded to bf16: tight, catches layout / masking bugs;

on random AND coordinate-dependent inputs, odd lengths, KV prefixes, GQA 1/2/4, left padding with
a fully padded row, non-contiguous q/k/v (slices of a fused qkv projection), general 4-D masks,
decode over a cache of odd length in several splits, bad inputs, and a tiny LlamaForCausalLM
whose logits must match the sdpa model's.
"""

import copy

import pytest
import torch

import metrics
from xpuinject_kernels import _backend, attention as A

BF16_ULP = 2.0**-7  # relative spacing of bf16 (upper bound of 1 ulp)
FP16_ULP = 2.0**-10


# (The interpreter fixes these kernels need under TRITON_INTERPRET=1 -- numpy >= 2.4 loop bounds,
# bf16 rounding and dot -- are applied for every test by conftest.py via xpuinject_kernels._interpret.)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def make(shape, kind, salt=0):
    """fp32 master values: randn, or coordinate-dependent sin(...) (every element distinct)."""
    if kind == "coord":
        return metrics.coord_tensor(shape, a=0.37 + 0.05 * salt, b=0.11 + 0.03 * salt, c=0.05 + 0.02 * salt) * 1.5
    g = torch.Generator().manual_seed(1234 + salt)
    return torch.randn(shape, generator=g)


def qkv(b, h, hk, sq, sk, d, kind, dtype, device):
    q = make((b, h, sq, d), kind, 0)
    k = make((b, hk, sk, d), kind, 1)
    v = make((b, hk, sk, d), kind, 2)
    return q, k, v, q.to(dtype).to(device), k.to(dtype).to(device), v.to(dtype).to(device)


def ulp_of(dtype):
    return {torch.bfloat16: BF16_ULP, torch.float16: FP16_ULP}.get(dtype, 0.0)


def check(name, out, q32, k32, v32, qd, kd, vd, **sem):
    """Compare a kernel output [b, sq, h, d] with (a) the fp64 reference on the unrounded inputs
    and (b) the oracle that mirrors the kernel's formats."""
    dtype = qd.dtype
    assert out.dtype == dtype and out.is_contiguous()
    out = out.cpu()  # references run on the CPU (fp64)
    qd, kd, vd = qd.cpu(), kd.cpu(), vd.cpu()
    sem = {key: (val.cpu() if isinstance(val, torch.Tensor) else val) for key, val in sem.items()}
    ref = A.attention_ref(q32.double(), k32.double(), v32.double(), dtype=torch.float64, **sem)
    scale = float(v32.abs().max())
    if dtype == torch.float32:
        # fp32 in, fp32 math: only summation order differs from fp64.
        metrics.assert_close(name + " vs fp64 ref", out, ref, atol=2e-5 * scale, rtol=2e-5, min_cosine=0.9999999)
        return
    u = ulp_of(dtype)
    oracle = A.attention_ref(qd.double(), kd.double(), vd.double(), dtype=torch.float64,
                             round_p_to=dtype, **sem).to(dtype)
    # The kernel rounds p to bf16 relative to a running max, the oracle after normalization, and
    # both round the output once: each element within ~2 ulps of its magnitude plus 1 ulp of the
    # value scale (the p rounding error is a weighted sum of |v|).
    metrics.assert_close(name + " vs oracle", out, oracle, atol=u * scale, rtol=2 * u)
    # User quality: inputs rounded to bf16 move the scores by ~ulp * |q||k| * scaling; loose.
    metrics.assert_close(name + " vs fp64 ref", out, ref, atol=8 * u * scale, rtol=8 * u, min_cosine=0.999)


def counts():
    return dict(_backend.launch_counts)


def delta(before, name):
    return _backend.launch_counts[name] - before.get(name, 0)


# ---------------------------------------------------------------------------------------------
# prefill
# ---------------------------------------------------------------------------------------------

PREFILL_CASES = [
    # b, h, hk, sq, sk, d, dtype
    (2, 4, 2, 1, 1, 32, torch.bfloat16),  # one token, no history
    (2, 4, 2, 7, 7, 64, torch.bfloat16),
    (2, 4, 4, 33, 33, 32, torch.bfloat16),  # GQA ratio 1
    (2, 4, 1, 67, 67, 64, torch.bfloat16),  # GQA ratio 4, 5 query blocks, tails everywhere
    (1, 4, 2, 33, 33, 80, torch.bfloat16),  # padded head dim 80 -> 128
    (1, 2, 1, 17, 17, 96, torch.bfloat16),
    (1, 2, 2, 17, 17, 128, torch.bfloat16),
    (2, 4, 2, 7, 40, 64, torch.bfloat16),  # KV prefix: queries are the last 7 of 40
    (2, 4, 2, 33, 67, 80, torch.bfloat16),
    (2, 4, 2, 33, 33, 64, torch.float16),
    (2, 4, 2, 33, 40, 64, torch.float32),
]


@pytest.mark.parametrize("kind", ["coord", "random"])
@pytest.mark.parametrize("case", PREFILL_CASES, ids=lambda c: "b{}h{}kv{}q{}k{}d{}-{}".format(*c[:6], str(c[6])[6:]))
def test_prefill_causal(device, case, kind):
    b, h, hk, sq, sk, d, dtype = case
    q32, k32, v32, q, k, v = qkv(b, h, hk, sq, sk, d, kind, dtype, device)
    before = counts()
    out = A.flash_attention_prefill(q, k, v, causal=True)
    assert delta(before, "attention.prefill.nomask") == 1
    assert out.shape == (b, sq, h, d)
    check(f"prefill causal {case[:6]} {dtype} {kind}", out, q32, k32, v32, q, k, v, causal=True)


@pytest.mark.parametrize("kind", ["coord", "random"])
def test_prefill_noncausal_custom_scaling(device, kind):
    b, h, hk, sq, sk, d = 2, 4, 2, 33, 20, 64
    q32, k32, v32, q, k, v = qkv(b, h, hk, sq, sk, d, kind, torch.bfloat16, device)
    out = A.flash_attention_prefill(q, k, v, causal=False, scaling=0.3)
    check(f"prefill noncausal scale0.3 {kind}", out, q32, k32, v32, q, k, v, causal=False, scaling=0.3)


def test_prefill_noncontiguous_fused_qkv(device):
    """q/k/v as transposed slices of one fused projection [b, s, (h + 2*hk) * d] (what
    transformers passes), plus a 1-element offset so the base pointer and row stride are not
    16-byte aligned."""
    b, s, h, hk, d = 2, 33, 4, 2, 64
    width = (h + 2 * hk) * d + 1
    fused32 = make((b, s, width), "coord", 5)
    fused = fused32.to(torch.bfloat16).to(device)

    def split(t):
        t = t[..., 1:]  # misaligned base (2 bytes) and row stride 2*(width) bytes, odd
        qv = t[..., : h * d].view(b, s, h, d).transpose(1, 2)
        kv = t[..., h * d: (h + hk) * d].view(b, s, hk, d).transpose(1, 2)
        vv = t[..., (h + hk) * d:].view(b, s, hk, d).transpose(1, 2)
        return qv, kv, vv

    q, k, v = split(fused)
    assert not q.is_contiguous() and not k.is_contiguous() and q.stride(2) == width
    assert not _backend.tma_ok(q)  # misaligned: a descriptor path would be wrong here
    q32, k32, v32 = split(fused32)
    before = counts()
    out = A.flash_attention_prefill(q, k, v, causal=True)
    assert delta(before, "attention.prefill") == 1
    check("prefill fused-qkv strided", out, q32, k32, v32, q, k, v, causal=True)
    # Same values, contiguous copies: bit-identical output (strides do not change the math).
    out_c = A.flash_attention_prefill(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(out, out_c)


def left_padding_mask(b, sk, pads, device):
    """bool [b, sk], True = attend; row i has pads[i] padded keys on the left."""
    m = torch.ones(b, sk, dtype=torch.bool)
    for i, p in enumerate(pads):
        m[i, :p] = False
    return m.to(device)


@pytest.mark.parametrize("mask_kind", ["bool", "additive_min", "additive_inf", "int"])
def test_prefill_left_padding(device, mask_kind):
    b, h, hk, sq, sk, d = 3, 4, 2, 33, 33, 32
    q32, k32, v32, q, k, v = qkv(b, h, hk, sq, sk, d, "random", torch.bfloat16, device)
    pads = [0, 5, sk]  # row 2 fully padded: every query row of batch 2 attends nothing
    keep = left_padding_mask(b, sk, pads, device)
    if mask_kind == "bool":
        km = keep
    elif mask_kind == "int":
        km = keep.to(torch.int64)  # transformers' 2-D attention_mask dtype
    else:
        neg = torch.finfo(torch.bfloat16).min if mask_kind == "additive_min" else float("-inf")
        km = torch.where(keep, 0.0, neg).to(torch.bfloat16)
        km[0, 3] = -2.5  # a finite bias must be added, not treated as a mask
    before = counts()
    out = A.flash_attention_prefill(q, k, v, causal=True, key_mask=km)
    assert delta(before, "attention.prefill.mask_key") == 1
    assert torch.isfinite(out.float()).all()
    # Fully masked rows: exactly zero. Batch 2 entirely; batch 1 queries 0..4 see only padding.
    assert torch.count_nonzero(out[2]) == 0
    assert torch.count_nonzero(out[1, :5]) == 0
    assert torch.count_nonzero(out[1, 5:]) > 0
    check(f"prefill left-pad {mask_kind}", out, q32, k32, v32, q, k, v, causal=True, key_mask=km)


def sdpa_style_mask(b, sq, sk, pads, device):
    """What transformers' sdpa_mask returns for causal + left padding: bool [b, 1, sq, sk]."""
    i = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    causal = j <= i
    pad = left_padding_mask(b, sk, pads, "cpu")
    return (causal[None, None] & pad[:, None, None, :]).to(device)


@pytest.mark.parametrize("form", ["bool", "additive", "per_head_bool", "broadcast_batch"])
def test_prefill_general_4d_mask(device, form):
    b, h, hk, sq, sk, d = 2, 4, 2, 67, 67, 32
    q32, k32, v32, q, k, v = qkv(b, h, hk, sq, sk, d, "coord", torch.bfloat16, device)
    m = sdpa_style_mask(b, sq, sk, [0, 20], device)
    if form == "additive":
        # eager_mask style: 0 / finfo(float32).min, plus a finite bias on a few entries
        m = torch.where(m, 0.0, torch.finfo(torch.float32).min)
        m[:, :, :, 30:33] += -1.25
    elif form == "per_head_bool":
        m = m.expand(b, h, sq, sk).clone()
        m[:, 1, :, ::3] = False  # head 1 additionally drops every third key
    elif form == "broadcast_batch":
        m = m[:1]  # [1, 1, sq, sk]: broadcast over the batch (stride 0)
    before = counts()
    out = A.flash_attention_prefill(q, k, v, causal=False, attn_mask=m)
    assert delta(before, "attention.prefill.mask_full") == 1
    assert torch.isfinite(out.float()).all()
    if form in ("bool", "additive", "per_head_bool"):
        assert torch.count_nonzero(out[1, :20]) == 0  # padded query rows attend nothing
    check(f"prefill 4-D mask {form}", out, q32, k32, v32, q, k, v, causal=False, attn_mask=m)


def test_prefill_key_mask_and_4d_mask_combine(device):
    b, h, hk, sq, sk, d = 2, 2, 1, 17, 17, 32
    q32, k32, v32, q, k, v = qkv(b, h, hk, sq, sk, d, "random", torch.float32, device)
    m = sdpa_style_mask(b, sq, sk, [0, 0], device)
    km = left_padding_mask(b, sk, [3, 6], device)
    out = A.flash_attention_prefill(q, k, v, causal=False, attn_mask=m, key_mask=km)
    check("prefill 4-D + key mask", out, q32, k32, v32, q, k, v, causal=False, attn_mask=m, key_mask=km)


# ---------------------------------------------------------------------------------------------
# decode
# ---------------------------------------------------------------------------------------------

DECODE_CASES = [
    # b, h, hk, L, d, splits, dtype
    (2, 4, 4, 67, 64, 1, torch.bfloat16),  # GQA 1, one split
    (2, 4, 2, 67, 64, 3, torch.bfloat16),  # GQA 2, splits of 32 keys (last one short)
    (2, 8, 2, 67, 32, 5, torch.bfloat16),  # GQA 4
    (1, 4, 1, 131, 80, 4, torch.bfloat16),
    (1, 2, 1, 33, 128, 2, torch.float16),
    (2, 4, 2, 45, 96, 3, torch.float32),
]


@pytest.mark.parametrize("kind", ["coord", "random"])
@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: "b{}h{}kv{}L{}d{}s{}-{}".format(*c[:6], str(c[6])[6:]))
def test_decode(device, case, kind):
    b, h, hk, L, d, splits, dtype = case
    q32, k32, v32, q, k, v = qkv(b, h, hk, 1, L, d, kind, dtype, device)
    before = counts()
    out = A.decode_attention(q, k, v, num_splits=splits)
    assert delta(before, "attention.decode") == 1
    assert delta(before, "attention.decode.split") == (1 if splits > 1 else 0)
    assert out.shape == (b, 1, h, d)
    check(f"decode {case[:6]} {dtype} {kind}", out, q32, k32, v32, q, k, v, causal=False)


def test_decode_cache_view_lengths_and_mask(device):
    """A static-cache-like view (capacity 100, 67 used: non-contiguous), per-sequence valid
    lengths (one 0: nothing to attend -> zeros; one shorter than a split), a left-padding mask,
    and a transformers 4-D [b, 1, 1, L] mask on the same data."""
    b, h, hk, cap, L, d = 3, 4, 2, 100, 67, 64
    q32 = make((b, h, 1, d), "random", 0)
    kc32, vc32 = make((b, hk, cap, d), "random", 1), make((b, hk, cap, d), "random", 2)
    q = q32.to(torch.bfloat16).to(device)
    kc, vc = kc32.to(torch.bfloat16).to(device), vc32.to(torch.bfloat16).to(device)
    k, v = kc[:, :, :L], vc[:, :, :L]
    k32, v32 = kc32[:, :, :L], vc32[:, :, :L]
    assert not k.is_contiguous()
    lens = torch.tensor([67, 0, 20], dtype=torch.int32, device=device)
    out = A.decode_attention(q, k, v, kv_lens=lens, num_splits=4)
    assert torch.count_nonzero(out[1]) == 0 and torch.isfinite(out.float()).all()
    check("decode cache view + kv_lens", out, q32, k32, v32, q, k, v, causal=False, kv_lens=lens)

    km = left_padding_mask(b, L, [0, 9, L], device)
    out = A.decode_attention(q, k, v, key_mask=km, num_splits=3)
    assert torch.count_nonzero(out[2]) == 0
    check("decode left-pad mask", out, q32, k32, v32, q, k, v, causal=False, key_mask=km)
    out4 = A.decode_attention(q, k, v, key_mask=km[:, None, None, :], num_splits=3)
    assert torch.equal(out, out4)
    add = torch.where(km, 0.0, torch.finfo(torch.float32).min)[:, None, None, :]
    out_add = A.decode_attention(q, k, v, key_mask=add, num_splits=3)
    assert torch.equal(out, out_add)


def test_decode_default_splits_cover_cache(device):
    """The default split heuristic on a long cache gives several splits and the right answer."""
    b, h, hk, L, d = 1, 2, 1, 600, 32
    q32, k32, v32, q, k, v = qkv(b, h, hk, 1, L, d, "coord", torch.bfloat16, device)
    n = A.decode_num_splits(b, hk, L, torch.device(device))
    assert 1 < n <= 10  # >= 64 keys per split
    before = counts()
    out = A.decode_attention(q, k, v)
    assert delta(before, "attention.decode.split") == 1
    check("decode default splits L600", out, q32, k32, v32, q, k, v, causal=False)


@pytest.mark.parametrize("splits", [1, 3, 8])
@pytest.mark.parametrize("hk, d", [(1, 64), (2, 128)])
def test_decode_advance_attends_the_new_key_and_counts_it(device, splits, hk, d):
    """advance=True: the counter holds the length before this step's key (written at slot
    counter); the launch attends over counter + 1 keys, then adds 1 to the counter. GQA 7 and 2,
    a cache length (54) that is no multiple of a split or block; the semaphores end at zero."""
    b, h, capacity, filled = 2, 7 * hk if hk == 1 else 4, 80, 53
    q32 = make((b, h, 1, d), "random", 0)
    kc32, vc32 = make((b, hk, capacity, d), "random", 1), make((b, hk, capacity, d), "random", 2)
    q = q32.to(torch.bfloat16).to(device)
    kc, vc = kc32.to(torch.bfloat16).to(device), vc32.to(torch.bfloat16).to(device)
    counter = torch.tensor(filled, dtype=torch.int64, device=device)
    before = counts()
    out = A.decode_attention(q, kc, vc, kv_lens=counter, num_splits=splits, advance=True)
    assert int(counter) == filled + 1
    assert delta(before, "attention.decode.advance") == 1
    lens = torch.full((b,), filled + 1, dtype=torch.int64, device=device)
    check(f"decode advance s{splits} kv{hk} d{d}", out, q32, kc32, vc32, q, kc, vc, causal=False, kv_lens=lens)
    # the same numbers as a launch that reads the advanced length without advancing it
    plain = A.decode_attention(q, kc, vc, kv_lens=counter, num_splits=splits)
    assert torch.equal(out, plain) and int(counter) == filled + 1
    assert int(_backend.semaphores(q.device, 1).abs().sum()) == 0
    with pytest.raises(ValueError, match="0-d counter"):
        A.decode_attention(q, kc, vc, kv_lens=lens, advance=True)


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_advance_autotuned_advances_the_counter_once(device, monkeypatch, splits):
    """XPUINJECT_AUTOTUNE=1: the tuner times every decode config on the launch's own operands, and
    a one-split launch advances the cache counter itself, so the tuner puts the counter back after
    each config it times (restore_value) and the step still advances it by one (on a GPU several
    configs are timed; the interpreter takes one)."""
    monkeypatch.setenv("XPUINJECT_AUTOTUNE", "1")
    monkeypatch.setattr(A, "_CONFIGS", {})
    b, h, hk, d, capacity, filled = 1, 6, 2, 64, 48, 21
    q32 = make((b, h, 1, d), "random", 3)
    kc32, vc32 = make((b, hk, capacity, d), "random", 4), make((b, hk, capacity, d), "random", 5)
    q = q32.to(torch.bfloat16).to(device)
    kc, vc = kc32.to(torch.bfloat16).to(device), vc32.to(torch.bfloat16).to(device)
    counter = torch.tensor(filled, dtype=torch.int64, device=device)
    out = A.decode_attention(q, kc, vc, kv_lens=counter, num_splits=splits, advance=True)
    assert int(counter) == filled + 1
    lens = torch.full((b,), filled + 1, dtype=torch.int64, device=device)
    check(f"decode advance autotuned s{splits}", out, q32, kc32, vc32, q, kc, vc, causal=False, kv_lens=lens)
    assert A._decode_fn(_backend.backend(q)).restore_value == ["LENS"]
    assert int(_backend.semaphores(q.device, 1).abs().sum()) == 0


# ---------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------


def test_bad_inputs(device):
    bf = dict(dtype=torch.bfloat16, device=device)
    q = torch.zeros(1, 4, 5, 64, **bf)
    k = torch.zeros(1, 2, 5, 64, **bf)
    with pytest.raises(ValueError, match="head_dim 48 unsupported"):
        A.flash_attention_prefill(torch.zeros(1, 4, 5, 48, **bf), torch.zeros(1, 2, 5, 48, **bf),
                                  torch.zeros(1, 2, 5, 48, **bf))
    with pytest.raises(ValueError, match="dtypes differ"):
        A.flash_attention_prefill(q, k.float(), k)
    with pytest.raises(ValueError, match="not a multiple of kv heads"):
        A.flash_attention_prefill(q, torch.zeros(1, 3, 5, 64, **bf), torch.zeros(1, 3, 5, 64, **bf))
    with pytest.raises(ValueError, match="seq_q 5 > seq_k 3"):
        A.flash_attention_prefill(q, k[:, :, :3], k[:, :, :3], causal=True)
    with pytest.raises(ValueError, match="key_mask shape"):
        A.flash_attention_prefill(q, k, k, key_mask=torch.ones(1, 4, dtype=torch.bool, device=device))
    with pytest.raises(ValueError, match="does not broadcast"):
        A.flash_attention_prefill(q, k, k, attn_mask=torch.ones(1, 1, 4, 5, dtype=torch.bool, device=device))
    with pytest.raises(ValueError, match="mask dtype torch.float64"):
        A.flash_attention_prefill(q, k, k, key_mask=torch.zeros(1, 5, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="query dtype torch.int32"):
        A.flash_attention_prefill(q.to(torch.int32), k.to(torch.int32), k.to(torch.int32))
    with pytest.raises(ValueError, match="want 4-D"):
        A.flash_attention_prefill(q[0], k, k)
    with pytest.raises(ValueError, match="decode takes exactly 1"):
        A.decode_attention(q, k, k)
    with pytest.raises(ValueError, match="num_splits 0"):
        A.decode_attention(q[:, :, :1], k, k, num_splits=0)
    with pytest.raises(ValueError, match="kv_lens"):
        A.decode_attention(q[:, :, :1], k, k, kv_lens=torch.ones(2, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="4-D mask"):
        A.decode_attention(q[:, :, :1], k, k, key_mask=torch.ones(1, 1, 2, 5, dtype=torch.bool, device=device))


class _FakeAttn(torch.nn.Module):
    def __init__(self, layer_idx=3, groups=2):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_key_value_groups = groups
        self.is_causal = True


def test_attention_forward_errors_name_the_module(device):
    bf = dict(dtype=torch.bfloat16, device=device)
    q, k = torch.zeros(1, 4, 5, 64, **bf), torch.zeros(1, 2, 5, 64, **bf)
    mod = _FakeAttn()
    with pytest.raises(ValueError, match=r"_FakeAttn \(layer_idx 3\).*dropout 0.1"):
        A.attention_forward(mod, q, k, k, None, dropout=0.1)
    with pytest.raises(ValueError, match=r"layer_idx 3.*head_dim 48 unsupported"):
        A.attention_forward(mod, torch.zeros(1, 4, 5, 48, **bf), torch.zeros(1, 2, 5, 48, **bf),
                            torch.zeros(1, 2, 5, 48, **bf), None)
    with pytest.raises(ValueError, match=r"layer_idx 3.*'sinks'"):
        A.attention_forward(mod, q, k, k, None, sinks=torch.zeros(4, **bf))
    with pytest.raises(ValueError, match=r"layer_idx 3.*softcap -30.0"):  # a cap is computed, a bad one named
        A.attention_forward(mod, q, k, k, None, softcap=-30.0)
    with pytest.raises(ValueError, match=r"num_key_value_groups 4"):
        A.attention_forward(_FakeAttn(groups=4), q, k, k, None)
    with pytest.raises(ValueError, match=r"layer_idx 3.*attn_mask shape"):
        A.attention_forward(mod, q, k, k, torch.ones(1, 1, 5, **dict(dtype=torch.bool, device=device)))


def test_attention_forward_matches_sdpa_contract(device):
    """attention_forward against transformers' own sdpa_attention_forward on the same inputs:
    no mask (causal), a 4-D bool mask, decode with and without a mask, and the empty-static-cache
    case (no mask, kv longer than q: sdpa drops the extra keys)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    mod = _FakeAttn(groups=2)
    b, h, hk, d = 2, 4, 2, 32
    for sq, sk, mask in [
        (9, 9, None),
        (9, 9, sdpa_style_mask(b, 9, 9, [0, 4], device)),
        (1, 23, None),
        (1, 23, left_padding_mask(b, 23, [0, 7], device)[:, None, None, :]),
        (9, 16, None),
    ]:
        q = make((b, h, sq, d), "random", 0).to(device)
        k = make((b, hk, sk, d), "random", 1).to(device)
        v = make((b, hk, sk, d), "random", 2).to(device)
        out, w = A.attention_forward(mod, q, k, v, mask, scaling=0.2)
        exp, _ = sdpa_attention_forward(mod, q, k, v, mask, scaling=0.2)
        assert w is None and out.shape == exp.shape
        rows = torch.ones(b, sq, dtype=torch.bool)
        if mask is not None and sq > 1:
            rows = mask[:, 0].any(-1).cpu()  # sdpa's fully masked rows are NaN/garbage; ours are 0
        rows = rows.to(out.device)
        metrics.assert_close(f"attention_forward vs sdpa q{sq} k{sk} mask={mask is not None}",
                             out[rows], exp[rows], atol=2e-5, rtol=2e-5)


# ---------------------------------------------------------------------------------------------
# transformers LlamaForCausalLM end to end
# ---------------------------------------------------------------------------------------------


def _tiny_llama(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    torch.manual_seed(7)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # random init std 0.02 makes attention nearly uniform; sharpen it
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return model.to(dtype)


@pytest.fixture(scope="module")
def registered():
    A.register_transformers("xpuinject")
    return "xpuinject"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama_end_to_end(device, registered, dtype):
    from transformers import DynamicCache

    stock = _tiny_llama(dtype).to(device)
    ours = copy.deepcopy(stock)
    ours.set_attn_implementation(registered)
    assert ours.config._attn_implementation == "xpuinject"
    assert stock.config._attn_implementation == "sdpa"
    ref32 = _tiny_llama(torch.float32).to(device)  # the user's quality baseline

    b, s = 3, 19
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 97, (b, s), generator=g).to(device)
    am = torch.ones(b, s, dtype=torch.long)
    am[1, :6] = 0  # left padding (what generate uses)
    am[2, :1] = 0
    am = am.to(device)
    valid = am.bool()

    with torch.no_grad():
        before = counts()
        c_ours, c_stock, c_ref = DynamicCache(config=ours.config), DynamicCache(config=stock.config), DynamicCache(config=ref32.config)
        lo = ours(input_ids=ids, attention_mask=am, past_key_values=c_ours, use_cache=True).logits
        assert delta(before, "attention.prefill") == 2  # one launch per layer
        assert delta(before, "attention.prefill.mask_full") == 2  # padded batch -> 4-D mask path
        ls = stock(input_ids=ids, attention_mask=am, past_key_values=c_stock, use_cache=True).logits
        lr = ref32(input_ids=ids, attention_mask=am, past_key_values=c_ref, use_cache=True).logits

        # one decode step with the padding mask extended by the new token
        nxt = torch.randint(0, 97, (b, 1), generator=g).to(device)
        am2 = torch.cat([am, torch.ones(b, 1, dtype=am.dtype, device=device)], 1)
        before = counts()
        do = ours(input_ids=nxt, attention_mask=am2, past_key_values=c_ours, use_cache=True).logits
        assert delta(before, "attention.decode") == 2
        ds = stock(input_ids=nxt, attention_mask=am2, past_key_values=c_stock, use_cache=True).logits
        dr = ref32(input_ids=nxt, attention_mask=am2, past_key_values=c_ref, use_cache=True).logits

        # no padding at all: transformers passes mask None and relies on is_causal
        before = counts()
        lo_np = ours(input_ids=ids[:1]).logits
        assert delta(before, "attention.prefill.nomask") == 2
        ls_np = stock(input_ids=ids[:1]).logits

    name = f"llama {str(dtype)[6:]}"
    if dtype == torch.float32:
        metrics.assert_close(name + " prefill logits vs sdpa", lo[valid], ls[valid], atol=1e-5, rtol=1e-4)
        metrics.assert_close(name + " decode logits vs sdpa", do, ds, atol=1e-5, rtol=1e-4)
        metrics.assert_close(name + " unpadded logits vs sdpa", lo_np, ls_np, atol=1e-5, rtol=1e-4)
        return
    # bf16: ours and stock bf16 round differently; both are compared with the fp32 model and
    # ours may not be meaningfully worse than stock bf16 (ratio printed).
    for what, o, st, r in [("prefill", lo[valid], ls[valid], lr[valid]), ("decode", do, ds, dr),
                           ("unpadded", lo_np, ls_np, None)]:
        if r is None:
            metrics.assert_close(f"{name} {what} logits vs sdpa bf16", o, st, atol=0.02, rtol=0.05, min_cosine=0.9995)
            continue
        mo = metrics.assert_close(f"{name} {what} ours vs fp32 model", o, r, atol=0.02, rtol=0.05, min_cosine=0.9995)
        ms = metrics.report(f"{name} {what} stock bf16 vs fp32 model", st, r)
        print(f"[metrics] {name} {what}: injected/stock max_abs ratio = {mo.max_abs / max(ms.max_abs, 1e-12):.2f}")
        assert mo.max_abs <= 2.0 * ms.max_abs + 1e-3
        agree = (o.argmax(-1) == r.argmax(-1)).float().mean().item()
        assert agree >= 0.9, f"top-1 agreement with fp32 model {agree}"


# ---------------------------------------------------------------------------------------------
# variants: logit soft-capping (Gemma 2) and sliding windows
# ---------------------------------------------------------------------------------------------

VARIANT_PREFILL_CASES = [
    # b, h, hk, sq, sk, d, dtype, softcap, window
    (2, 6, 2, 37, 37, 64, torch.bfloat16, 2.0, None),  # GQA 3, a cap that bends the scores
    (1, 6, 2, 37, 37, 80, torch.float16, None, 11),  # window shorter than the prompt
    (2, 6, 2, 37, 37, 64, torch.bfloat16, 2.0, 11),  # both, tails in every block
    (1, 6, 2, 9, 45, 96, torch.bfloat16, 1.5, 20),  # KV prefix: queries are the last 9 of 45
    (1, 3, 1, 33, 33, 128, torch.float32, 50.0, 1),  # window 1: each query sees itself only
    (1, 6, 2, 21, 21, 256, torch.bfloat16, 2.0, 9),  # Gemma's head_dim 256
    (1, 3, 1, 5, 26, 256, torch.float16, None, None),  # head_dim 256, a KV prefix, plain
]


@pytest.mark.parametrize("kind", ["coord", "random"])
@pytest.mark.parametrize("case", VARIANT_PREFILL_CASES,
                         ids=lambda c: "h{}kv{}q{}k{}d{}-{}-cap{}-w{}".format(*c[1:6], str(c[6])[6:], c[7], c[8]))
def test_prefill_softcap_and_window(device, case, kind):
    b, h, hk, sq, sk, d, dtype, cap, win = case
    q32, k32, v32, q, k, v = qkv(b, h, hk, sq, sk, d, kind, dtype, device)
    q32, q = q32 * 3, (q32 * 3).to(dtype).to(device)  # scores of several units: the cap matters
    out = A.flash_attention_prefill(q, k, v, causal=True, softcap=cap, window=win)
    check(f"prefill {case}", out, q32, k32, v32, q, k, v, causal=True, softcap=cap, window=win)
    if cap or win:  # the variant changed the result (a test of the test)
        plain = A.flash_attention_prefill(q, k, v, causal=True)
        assert not torch.equal(out, plain)


def test_prefill_window_with_mask_matches_windowed_mask(device):
    """A 4-D causal mask plus window= gives what a mask holding the window gives (transformers
    builds the windowed mask itself for sliding layers)."""
    b, h, hk, s, d, w = 1, 6, 2, 40, 64, 13
    q32, k32, v32, q, k, v = qkv(b, h, hk, s, s, d, "random", torch.bfloat16, device)
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    causal = (j <= i)[None, None].to(device)
    windowed = causal & (j > i - w)[None, None].to(device)
    a = A.flash_attention_prefill(q, k, v, causal=False, attn_mask=causal, window=w)
    ref = A.flash_attention_prefill(q, k, v, causal=False, attn_mask=windowed)
    assert torch.equal(a, ref)
    check("prefill mask + window", a, q32, k32, v32, q, k, v, causal=False, attn_mask=windowed)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cap, win, d", [(2.0, None, 64), (None, 23, 64), (1.5, 70, 64), (2.0, 23, 256)])
def test_decode_softcap_and_window(device, dtype, cap, win, d):
    """Decode over a static-cache view (capacity 100, per-row lengths 67 / 5 / 40), GQA 3, the
    window older than some rows' first split and shorter than others' lengths."""
    b, h, hk, capacity = 3, 6, 2, 100
    q32 = make((b, h, 1, d), "random", 0) * 3
    kc32, vc32 = make((b, hk, capacity, d), "random", 1), make((b, hk, capacity, d), "random", 2)
    q = q32.to(dtype).to(device)
    kc, vc = kc32.to(dtype).to(device), vc32.to(dtype).to(device)
    lens = torch.tensor([67, 5, 40], dtype=torch.int64, device=device)
    for splits in (1, 4):
        out = A.decode_attention(q, kc, vc, kv_lens=lens, num_splits=splits, softcap=cap, window=win)
        check(f"decode cap{cap} w{win} s{splits}", out, q32, kc32, vc32, q, kc, vc,
              causal=False, kv_lens=lens, softcap=cap, window=win)
    # without lengths the query is the last key's position
    out = A.decode_attention(q, kc, vc, num_splits=3, softcap=cap, window=win)
    check(f"decode full cap{cap} w{win}", out, q32, kc32, vc32, q, kc, vc, causal=False, softcap=cap, window=win)


def test_variant_arguments_are_checked(device):
    q = torch.zeros(1, 2, 4, 32, dtype=torch.bfloat16, device=device)
    for bad, msg in (({"softcap": -1.0}, "softcap -1.0"), ({"softcap": float("nan")}, "softcap nan"),
                     ({"window": -3}, "window -3"), ({"window": 2.5}, "window 2.5")):
        with pytest.raises(ValueError, match=msg):
            A.flash_attention_prefill(q, q, q, **bad)
        with pytest.raises(ValueError, match=msg):
            A.decode_attention(q[:, :, :1], q, q, **bad)


def test_attention_forward_passes_softcap_and_window(device):
    """transformers passes softcap= and sliding_window= (Gemma2Attention): without a mask both
    apply; with a mask the window is the mask's (a static layer's whole buffer comes with it, so
    the keys need not end at the last query)."""
    b, h, hk, s, d, w = 1, 6, 2, 30, 64, 7
    q32, k32, v32, q, k, v = qkv(b, h, hk, s, s, d, "random", torch.bfloat16, device)
    q32, q = q32 * 3, (q32 * 3).to(torch.bfloat16).to(device)
    mod = _FakeAttn(groups=3)
    out, _ = A.attention_forward(mod, q, k, v, None, scaling=0.2, softcap=2.0, sliding_window=w)
    check("attention_forward cap + window", out, q32, k32, v32, q, k, v, causal=True, scaling=0.2, softcap=2.0, window=w)
    # a 16-slot padded buffer past the 30 keys, with a causal mask over the real ones: the window
    # must come from the mask alone (the kernel's own would count from the buffer's end)
    kp = torch.cat([k, torch.zeros(b, hk, 16, d, dtype=k.dtype, device=device)], dim=2)
    vp = torch.cat([v, torch.zeros(b, hk, 16, d, dtype=v.dtype, device=device)], dim=2)
    i, j = torch.arange(s)[:, None], torch.arange(s + 16)[None, :]
    mask = ((j <= i) & (j > i - w))[None, None].to(device)
    got, _ = A.attention_forward(mod, q, kp, vp, mask, scaling=0.2, softcap=2.0, sliding_window=w)
    assert torch.equal(got, out)
