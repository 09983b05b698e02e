"""RoPE vs transformers' apply_rotary_pos_emb (with cos/sin from LlamaRotaryEmbedding, Llama-3
rope scaling included), the fp32 reference and a bf16-mirroring oracle; GQA, odd head_dim,
non-contiguous views of a fused qkv projection, in place and out of place."""

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import metrics
from xpuinject_kernels import _backend, rope

BF16_ULP = 2.0**-7  # relative spacing of bf16 at the bottom of a binade (1 ulp upper bound)
FP16_ULP = 2.0**-10


def rotary(head_dim, seq, batch, dtype, device, scaling=True, positions=None):
    cfg = LlamaConfig(
        hidden_size=head_dim * 4, num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
        max_position_embeddings=256,
        rope_parameters=(
            {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
            if scaling else {"rope_type": "default", "rope_theta": 10000.0}
        ),
    )
    emb = LlamaRotaryEmbedding(cfg)
    if positions is None:
        positions = torch.arange(seq).unsqueeze(0).expand(batch, seq) * 7 + 3  # non-trivial positions
    x = torch.zeros(1, dtype=dtype)
    cos, sin = emb(x, positions)
    return cos.to(device), sin.to(device)


def oracle(q, k, cos, sin):
    """Mirror the kernel: fp32 math on the given (bf16) inputs, one rounding to q.dtype."""
    qr, kr = rope.apply_rope_ref(q, k, cos, sin)
    return qr.to(q.dtype), kr.to(k.dtype)


def make(shape, kind, dtype, device):
    x = metrics.coord_tensor(shape) * 2.0 if kind == "coord" else torch.randn(shape)
    return x.to(dtype).to(device)


def check(name, q, k, cos, sin, qo, ko, dtype):
    ulp = BF16_ULP if dtype == torch.bfloat16 else FP16_ULP
    qm, km = oracle(q, k, cos, sin)
    metrics.assert_close(name + " q vs oracle", qo, qm, atol=1e-6, rtol=ulp)
    metrics.assert_close(name + " k vs oracle", ko, km, atol=1e-6, rtol=ulp)
    qs, ks = apply_rotary_pos_emb(q, k, cos, sin)
    # stock rounds three times in bf16; we round once: within 2 ulps of each other (+ abs slack
    # near zero where the stock cancellation error dominates)
    metrics.assert_close(name + " q vs transformers", qo, qs, atol=4 * ulp, rtol=2 * ulp)
    metrics.assert_close(name + " k vs transformers", ko, ks, atol=4 * ulp, rtol=2 * ulp)
    qr, kr = rope.apply_rope_ref(q, k, cos, sin)
    metrics.assert_close(name + " q vs fp32 ref", qo, qr, atol=1e-6, rtol=ulp, min_cosine=0.9999)
    metrics.assert_close(name + " k vs fp32 ref", ko, kr, atol=1e-6, rtol=ulp, min_cosine=0.9999)


@pytest.mark.parametrize("kind", ["coord", "random"])
@pytest.mark.parametrize(
    "dtype,b,hq,hk,s,d,scaling",
    [
        (torch.bfloat16, 2, 4, 2, 5, 16, True),    # GQA 2:1, llama3 scaling
        (torch.bfloat16, 1, 3, 1, 7, 80, False),   # head_dim 80: half 40 is not a power of 2
        (torch.float16, 2, 8, 8, 3, 64, True),     # MHA
        (torch.bfloat16, 1, 6, 2, 9, 6, False),    # tiny odd half (3)
    ],
)
def test_rope_out_of_place(device, kind, dtype, b, hq, hk, s, d, scaling):
    q = make((b, hq, s, d), kind, dtype, device)
    k = make((b, hk, s, d), "random" if kind == "coord" else "coord", dtype, device)
    cos, sin = rotary(d, s, b, dtype, device, scaling)
    q0, k0 = q.clone(), k.clone()
    before = _backend.launch_counts["apply_rope"]
    qo, ko = rope.apply_rope(q, k, cos, sin)
    assert _backend.launch_counts["apply_rope"] == before + 1
    assert torch.equal(q, q0) and torch.equal(k, k0), "out-of-place apply_rope modified its inputs"
    assert qo.shape == q.shape and ko.shape == k.shape and qo.dtype == dtype
    check(f"rope {kind} {dtype} b{b} hq{hq} hk{hk} s{s} d{d}", q, k, cos, sin, qo, ko, dtype)


def fused_qkv(b, s, hq, hk, d, dtype, device):
    """q/k/v as transformers gets them from a fused qkv projection: views with row stride
    (hq+2hk)*d, transposed to [b, h, s, d] (non-contiguous)."""
    n = (hq + 2 * hk) * d
    qkv = make((b, s, n), "coord", dtype, device)
    q = qkv[..., : hq * d].view(b, s, hq, d).transpose(1, 2)
    k = qkv[..., hq * d: (hq + hk) * d].view(b, s, hk, d).transpose(1, 2)
    v = qkv[..., (hq + hk) * d:]
    return qkv, q, k, v


@pytest.mark.parametrize("d", [16, 70])
def test_rope_fused_qkv_views(device, d):
    b, s, hq, hk = 2, 5, 4, 1
    qkv, q, k, v = fused_qkv(b, s, hq, hk, d, torch.bfloat16, device)
    assert not q.is_contiguous() and not k.is_contiguous()
    cos, sin = rotary(d, s, b, torch.bfloat16, device)
    qo, ko = rope.apply_rope(q, k, cos, sin)
    check(f"rope fused-qkv views d{d}", q, k, cos, sin, qo, ko, torch.bfloat16)

    # in place through the views: q and k regions of the fused buffer rotate, v is untouched
    qm, km = oracle(q, k, cos, sin)
    v0 = v.clone()
    before = _backend.launch_counts["apply_rope.inplace"]
    qi, ki = rope.apply_rope(q, k, cos, sin, inplace=True)
    assert _backend.launch_counts["apply_rope.inplace"] == before + 1
    assert qi.data_ptr() == q.data_ptr() and ki.data_ptr() == k.data_ptr()
    metrics.assert_close(f"rope inplace q d{d}", q, qm, atol=1e-6, rtol=BF16_ULP)
    metrics.assert_close(f"rope inplace k d{d}", k, km, atol=1e-6, rtol=BF16_ULP)
    assert torch.equal(qkv[..., (hq + hk) * d:], v0)


def test_rope_cos_broadcast_and_fp32_cos(device):
    b, h, s, d = 3, 2, 4, 32
    q = make((b, h, s, d), "coord", torch.bfloat16, device)
    k = make((b, h, s, d), "random", torch.bfloat16, device)
    # batch-1 cos/sin (shared positions) in fp32, as a model computing rope in fp32 passes them
    cos, sin = rotary(d, s, 1, torch.float32, device)
    assert cos.shape[0] == 1
    qo, ko = rope.apply_rope(q, k, cos, sin)
    qm, km = oracle(q, k, cos.expand(b, s, d), sin.expand(b, s, d))
    metrics.assert_close("rope cos batch-1 fp32 q", qo, qm, atol=1e-6, rtol=BF16_ULP)
    metrics.assert_close("rope cos batch-1 fp32 k", ko, km, atol=1e-6, rtol=BF16_ULP)
    # misaligned cos rows (a slice of a wider buffer)
    wide = torch.cat([cos, cos[..., :3]], dim=-1)[..., :d]
    assert wide.stride(1) == d + 3
    qo2, _ = rope.apply_rope(q, k, wide, sin)
    assert torch.equal(qo2, qo)


def test_rope_bad_inputs(device):
    q = make((1, 2, 3, 8), "random", torch.bfloat16, device)
    k = make((1, 1, 3, 8), "random", torch.bfloat16, device)
    cos, sin = rotary(8, 3, 1, torch.bfloat16, device)
    with pytest.raises(ValueError, match="head_dim"):
        rope.apply_rope(q[..., :7], k[..., :7], cos[..., :7], sin[..., :7])
    with pytest.raises(ValueError, match="want \\[batch, heads, seq, head_dim\\]"):
        rope.apply_rope(q[0], k, cos, sin)
    with pytest.raises(ValueError, match="incompatible"):
        rope.apply_rope(q, make((1, 1, 4, 8), "random", torch.bfloat16, device), cos, sin)
    with pytest.raises(ValueError, match="cos shape"):
        rope.apply_rope(q, k, cos[:, :2], sin)
    with pytest.raises(ValueError, match="k dtype"):
        rope.apply_rope(q, k.half(), cos, sin)
    with pytest.raises(ValueError, match="dtype"):
        rope.apply_rope(q.to(torch.int32), k.to(torch.int32), cos, sin)


def phi3_rotary(head_dim, factor, seq, batch, dtype, device):
    """cos/sin of Phi-3's own rotary embedding with partial_rotary_factor (Phi-4-mini: 0.75):
    [batch, seq, head_dim * factor]."""
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    cfg = Phi3Config(hidden_size=head_dim * 3, num_attention_heads=3, num_key_value_heads=1,
                     max_position_embeddings=256, pad_token_id=0,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": factor})
    positions = torch.arange(seq).unsqueeze(0).expand(batch, seq) * 5 + 2
    cos, sin = Phi3RotaryEmbedding(cfg)(torch.zeros(1, dtype=dtype), positions)
    return cos.to(device), sin.to(device)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype,hq,hk,d,factor", [
    (torch.bfloat16, 6, 2, 128, 0.75),  # Phi-4-mini's 96 of 128, GQA 3
    (torch.float16, 3, 1, 80, 0.6),     # 48 of 80: the rotated half (24) and the rest (32) odd-sized tiles
])
def test_rope_partial_rotary(device, inplace, dtype, hq, hk, d, factor):
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb as phi3_rope

    b, s = 2, 7
    cos, sin = phi3_rotary(d, factor, s, b, dtype, device)
    rd = cos.shape[-1]
    assert rd == int(d * factor) < d
    q = make((b, hq, s, d), "coord", dtype, device)
    k = make((b, hk, s, d), "random", dtype, device)
    q0, k0 = q.clone(), k.clone()
    qo, ko = rope.apply_rope(q, k, cos, sin, inplace=inplace)
    # fp64 reference: the first rd channels rotate, the rest are the inputs bit for bit
    qr, kr = rope.apply_rope_ref(q0, k0, cos, sin, dtype=torch.float64)
    ulp = BF16_ULP if dtype == torch.bfloat16 else FP16_ULP
    metrics.assert_close("partial q vs fp64", qo, qr, atol=1e-6, rtol=ulp)
    metrics.assert_close("partial k vs fp64", ko, kr, atol=1e-6, rtol=ulp)
    assert torch.equal(qo[..., rd:], q0[..., rd:]) and torch.equal(ko[..., rd:], k0[..., rd:])
    assert not torch.equal(qo[..., :rd], q0[..., :rd])
    qs, ks = phi3_rope(q0, k0, cos, sin)  # transformers' own, rounding three times
    metrics.assert_close("partial q vs transformers", qo, qs, atol=4 * ulp, rtol=2 * ulp)
    metrics.assert_close("partial k vs transformers", ko, ks, atol=4 * ulp, rtol=2 * ulp)


@pytest.mark.parametrize("order", [None, "llama", "gemma"])
def test_rope_without_rotary(device, order):
    """rotary_dim 0 (a NoPE layer's zero-width cos/sin): out of place q and k come back equal and
    new; in place with no norms there is nothing to do and nothing launches; with the q/k norms,
    the norm kernels' output bit for bit."""
    from xpuinject_kernels import rmsnorm

    b, s, hq, hk, d = 2, 3, 6, 2, 80
    q, k = qkv_views(b, s, hq, hk, d, torch.bfloat16, device, seed=4)
    cos, sin = rotary(d, s, b, q.dtype, device)
    cos, sin = cos[..., :0], sin[..., :0]
    nw, want_q, want_k = {}, q.clone(), k.clone()
    if order is not None:
        qw, kw = (w.to(device) for w in qk_norm_weights(order, d, seed=5))
        nw = dict(q_norm_weight=qw, k_norm_weight=kw, eps=NORM_EPS, norm_round=order == "llama")
        norm = rmsnorm.rms_norm if order == "llama" else rmsnorm.rms_norm_gemma
        want_q, want_k = norm(q, qw, NORM_EPS), norm(k, kw, NORM_EPS)
    got_q, got_k = rope.apply_rope(q, k, cos, sin, **nw)
    assert got_q is not q and torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    before = dict(_backend.launch_counts)
    q_in, k_in = q.clone(), k.clone()
    got_q, got_k = rope.apply_rope(q_in, k_in, cos, sin, inplace=True, **nw)
    assert got_q is q_in and torch.equal(q_in, want_q) and torch.equal(k_in, want_k)
    launched = sum(_backend.launch_counts.values()) - sum(before.values())
    assert launched == (order is not None)


def test_rope_partial_rotary_bad_widths(device):
    q = torch.zeros(1, 2, 3, 64, dtype=torch.bfloat16, device=device)
    for rd in (66, 31):
        cs = torch.zeros(1, 3, rd, dtype=torch.bfloat16, device=device)
        with pytest.raises(ValueError, match=f"cos shape \\(1, 3, {rd}\\).*rotary_dim even and at most head_dim 64"):
            rope.apply_rope(q, q, cs, cs)
    with pytest.raises(ValueError, match="cos has 48 columns, sin 32"):
        rope.apply_rope(q, q, torch.zeros(1, 3, 48, device=device), torch.zeros(1, 3, 32, device=device))


NORM_EPS = 1e-6


def qk_norm_weights(order, d, seed):
    """q_norm / k_norm weights as the fused launch takes them: Llama's order the module's own bf16
    weight (around 1, not 1), Gemma's the fp32 1 + w folded from a raw w around 0."""
    g = torch.Generator().manual_seed(seed)
    if order == "llama":
        return [(0.5 + torch.rand(d, generator=g)).to(torch.bfloat16) for _ in range(2)]
    return [1.0 + 0.3 * torch.randn(d, generator=g) for _ in range(2)]


def qkv_views(b, s, hq, hk, d, dtype, device, seed):
    """q [B, Hq, S, D] and k [B, Hk, S, D] as a decoder layer makes them: transposed views of one
    fused projection, far from unit rms."""
    torch.manual_seed(seed)
    qkv = (torch.randn(b, s, (hq + 2 * hk) * d) * 3 + 0.5).to(dtype).to(device)
    q, k, _ = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    return q.view(b, s, hq, d).transpose(1, 2), k.view(b, s, hk, d).transpose(1, 2)


QK_NORM_CASES = [  # b, s, hq, hk, d, rotary_factor (None: full)
    (1, 5, 6, 2, 128, None),   # GQA 3
    (2, 3, 10, 2, 80, None),   # GQA 5, head_dim 80: q heads past one block of 8
    (2, 4, 9, 3, 96, 0.75),    # partial rotary (72 of 96): the unrotated channels normalized too
]


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("order", ["llama", "gemma"])
@pytest.mark.parametrize("b,s,hq,hk,d,factor", QK_NORM_CASES)
def test_fused_qk_norms_equal_the_norm_kernels_then_rope(device, inplace, order, b, s, hq, hk, d, factor):
    """q_norm / k_norm in the RoPE launch: bit for bit our RMSNorm kernel (rms_norm, or
    rms_norm_gemma on the folded 1 + w) followed by apply_rope, in place and out of place; the
    other rounding order gives other values, so the test sees the order."""
    from xpuinject_kernels import rmsnorm

    q, k = qkv_views(b, s, hq, hk, d, torch.bfloat16, device, seed=s)
    cos, sin = rotary(d, s, b, q.dtype, device) if factor is None else phi3_rotary(d, factor, s, b, q.dtype, device)
    qw, kw = (w.to(device) for w in qk_norm_weights(order, d, seed=d))
    norm = rmsnorm.rms_norm if order == "llama" else rmsnorm.rms_norm_gemma
    want_q, want_k = rope.apply_rope(norm(q, qw, NORM_EPS), norm(k, kw, NORM_EPS), cos, sin)
    before = _backend.launch_counts["apply_rope.norm"]
    q0, k0 = q.clone(), k.clone()
    got_q, got_k = rope.apply_rope(q, k, cos, sin, inplace=inplace, q_norm_weight=qw, k_norm_weight=kw,
                                   eps=NORM_EPS, norm_round=order == "llama")
    assert _backend.launch_counts["apply_rope.norm"] == before + 1
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    if inplace:
        assert got_q is q and got_k is k
    else:
        assert torch.equal(q, q0) and torch.equal(k, k0)
    ow = torch.float32 if order == "llama" else torch.bfloat16
    other_q, _ = rope.apply_rope(q0, k0, cos, sin, q_norm_weight=qw.to(ow), k_norm_weight=kw.to(ow), eps=NORM_EPS,
                                 norm_round=order != "llama")
    assert not torch.equal(other_q, want_q)


@pytest.mark.parametrize("b,s,hq,hk,d,factor", QK_NORM_CASES[1:])
def test_fused_qk_norms_match_fp64(device, b, s, hq, hk, d, factor):
    """Against the fp64 norm then rotation: the rotation's relative tolerance, with one bf16 ulp
    absolute (the norm's output is O(1) and rounded once to bf16 before the rotation)."""
    q, k = qkv_views(b, s, hq, hk, d, torch.bfloat16, device, seed=9)
    cos, sin = rotary(d, s, b, q.dtype, device) if factor is None else phi3_rotary(d, factor, s, b, q.dtype, device)
    qw, kw = (w.to(device) for w in qk_norm_weights("gemma", d, seed=3))

    def ref(x, w):
        xd = x.double()
        return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w.double()

    want_q, want_k = rope.apply_rope_ref(ref(q, qw), ref(k, kw), cos, sin, dtype=torch.float64)
    got_q, got_k = rope.apply_rope(q, k, cos, sin, q_norm_weight=qw, k_norm_weight=kw, eps=NORM_EPS,
                                   norm_round=False)
    metrics.assert_close("normed q", got_q, want_q, atol=BF16_ULP, rtol=BF16_ULP, min_cosine=0.9999)
    metrics.assert_close("normed k", got_k, want_k, atol=BF16_ULP, rtol=BF16_ULP, min_cosine=0.9999)


def _hunyuan_stock(x, cos, sin, w, rd):
    """HunYuan's attention in bf16 as its modules run it: the rotation (each product and the sum
    rounded), then HunYuanDenseV1RMSNorm on the rounded result (Llama's order)."""
    c, s_ = cos.unsqueeze(1), sin.unsqueeze(1)
    r = x[..., :rd]
    x = torch.cat(((r * c) + (rope.rotate_half_ref(r) * s_), x[..., rd:]), dim=-1)
    xf = x.float()
    n = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)).to(x.dtype)
    return w * n


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("b,s,hq,hk,d,factor", QK_NORM_CASES)
def test_fused_qk_norms_after_rope_match_fp64(device, inplace, b, s, hq, hk, d, factor):
    """norm_after (HunYuan's order: q/k RMSNorm on the rotated heads) against the fp64 rotation
    then norm: within one bf16 rounding of the O(1) output, and no further from it than stock's
    bf16 modules are; the before order gives other values, so the test sees the order."""
    q, k = qkv_views(b, s, hq, hk, d, torch.bfloat16, device, seed=5)
    cos, sin = rotary(d, s, b, q.dtype, device) if factor is None else phi3_rotary(d, factor, s, b, q.dtype, device)
    # weights far from 1, different across a rotated pair: the order is then visible
    qw, kw = (w.to(torch.bfloat16).to(device) for w in qk_norm_weights("llama", d, seed=d))
    rd = cos.shape[-1]

    def ref(x, w):
        r, _ = rope.apply_rope_ref(x, x, cos, sin, dtype=torch.float64)
        return r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w.double()

    want_q, want_k = ref(q, qw), ref(k, kw)
    q0, k0 = q.clone(), k.clone()
    got_q, got_k = rope.apply_rope(q, k, cos, sin, inplace=inplace, q_norm_weight=qw, k_norm_weight=kw,
                                   eps=NORM_EPS, norm_after=True)
    if inplace:
        assert got_q is q and got_k is k
    metrics.assert_close("q normed after rope", got_q, want_q, atol=BF16_ULP, rtol=BF16_ULP, min_cosine=0.9999)
    metrics.assert_close("k normed after rope", got_k, want_k, atol=BF16_ULP, rtol=BF16_ULP, min_cosine=0.9999)
    for name, got, x, w, want in (("q", got_q, q0, qw, want_q), ("k", got_k, k0, kw, want_k)):
        ours = (got.double() - want).abs()
        stock = (_hunyuan_stock(x, cos.to(x.device), sin.to(x.device), w, rd).double() - want).abs()
        assert ours.mean() <= stock.mean(), f"{name}: mean error {ours.mean():.3g} over stock's {stock.mean():.3g}"
    before_q, _ = rope.apply_rope(q0, k0, cos, sin, q_norm_weight=qw, k_norm_weight=kw, eps=NORM_EPS)
    assert not torch.equal(before_q, got_q)


def test_fused_qk_norms_refuse_bad_weights(device):
    q, k = qkv_views(1, 2, 4, 2, 64, torch.bfloat16, device, seed=1)
    cos, sin = rotary(64, 2, 1, q.dtype, device)
    w = torch.ones(64, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="apply_rope: q_norm_weight and k_norm_weight go together"):
        rope.apply_rope(q, k, cos, sin, q_norm_weight=w)
    with pytest.raises(ValueError, match=r"apply_rope: k_norm_weight shape \(32,\): want \[head_dim 64\]"):
        rope.apply_rope(q, k, cos, sin, q_norm_weight=w, k_norm_weight=w[:32])
    with pytest.raises(ValueError, match="apply_rope: q_norm_weight dtype torch.float32 would make the norm's output"):
        rope.apply_rope(q, k, cos, sin, q_norm_weight=w.float(), k_norm_weight=w)
    with pytest.raises(ValueError, match="apply_rope: eps must be >= 0"):
        rope.apply_rope(q, k, cos, sin, q_norm_weight=w, k_norm_weight=w, eps=-1.0)
