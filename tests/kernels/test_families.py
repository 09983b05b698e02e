"""Gemma's and Phi-3's kernel variants against float64 references and transformers' own modules:
the Gemma RMSNorm order (fp32 normalize, times the fp32 (1 + w), one rounding), its fused residual
add, the GeGLU epilogue of the gate/up GEMM, and the layers that run them (bf16 and fp16, odd
shapes)."""

import pytest
import torch
from transformers import Gemma2Config, Phi3Config
from transformers.models.gemma2.modeling_gemma2 import Gemma2MLP, Gemma2RMSNorm
from transformers.models.phi3.modeling_phi3 import Phi3Attention, Phi3MLP

from xpuinject_kernels import layers, packing, rmsnorm
from xpuinject_kernels.gemm import gemm, gemm_ref

EPS = 1e-6
DTYPES = [torch.bfloat16, torch.float16]


def ulp(dtype, x):
    """The spacing of dtype at |x| (the error one rounding may add, times two)."""
    return torch.finfo(dtype).eps * x.abs().clamp(min=torch.finfo(dtype).tiny)


def gemma_w(n):
    # a raw Gemma weight around 0, not representable in bf16 with 1 added
    return 0.3 * torch.sin(0.7 * torch.arange(n, dtype=torch.float64) + 0.1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 123), (3, 7, 96), (2, 2304)])
def test_rms_norm_gemma_rounds_once(device, dtype, shape):
    torch.manual_seed(0)
    x = (torch.randn(shape) * 2 + 0.3).to(dtype)
    w = gemma_w(shape[-1])
    ref = rmsnorm.rms_norm_gemma_ref(x, w, EPS)  # float64, no rounding
    got = rmsnorm.rms_norm_gemma(x.to(device), (1 + w).float().to(device), EPS).cpu()
    assert got.dtype == dtype and got.shape == x.shape
    err = (got.double() - ref).abs()
    # one rounding of an fp32 result: half an ulp of the output, plus fp32 noise
    assert (err <= 0.5 * ulp(dtype, ref) + 1e-5 * ref.abs() + 1e-6).all(), err.max()
    # Llama's order (round after normalizing, then multiply) is measurably further from the reference
    llama = rmsnorm.rms_norm(x.to(device), (1 + w).float().to(device), EPS).cpu().to(dtype)
    assert (llama.double() - ref).abs().mean() > err.mean()


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_gemma_matches_transformers(device, dtype):
    """The stock half-precision module holds w in its dtype; given 1 + that w the kernel computes
    what Gemma2RMSNorm computes (up to the order of the variance sum)."""
    torch.manual_seed(1)
    n = 200
    x = (torch.randn(4, 9, n) * 3).to(dtype)
    m = Gemma2RMSNorm(n, eps=EPS).to(dtype)
    with torch.no_grad():
        m.weight.copy_(gemma_w(n).to(dtype))
        want = m(x)
    got = rmsnorm.rms_norm_gemma(x.to(device), 1.0 + m.weight.float().to(device), EPS).cpu()
    mism = (got != want).float().mean().item()
    assert mism < 0.01 and (got.double() - want.double()).abs().max() <= ulp(dtype, want.double()).max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_gemma(device, dtype):
    torch.manual_seed(2)
    x, r = (torch.randn(6, 160) * 2).to(dtype), (torch.randn(6, 160)).to(dtype)
    w = gemma_w(160)
    new_res, normed = rmsnorm.add_rms_norm_gemma(x.to(device), r.to(device), (1 + w).float().to(device), EPS)
    assert torch.equal(new_res.cpu(), x + r)  # the residual rounded as a half-precision add rounds it
    ref = rmsnorm.rms_norm_gemma_ref(x + r, w, EPS)
    assert normed.dtype == dtype
    assert ((normed.cpu().double() - ref).abs() <= 0.5 * ulp(dtype, ref) + 1e-5 * ref.abs() + 1e-6).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, k, i, bias", [(5, 96, 80, False), (17, 40, 48, True), (1, 64, 128, False)])
def test_gemm_geglu(device, dtype, m, k, i, bias):
    torch.manual_seed(3)
    x = torch.randn(m, k).to(dtype)
    w = (torch.randn(k, 2 * i) / k**0.5).to(dtype)  # [gate | up], K-major
    b = (torch.randn(2 * i) * 0.1).to(dtype) if bias else None
    y = x.double() @ w.double() + (b.double() if bias else 0)
    g, u = y[:, :i], y[:, i:]
    ref = 0.5 * g * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (g + 0.044715 * g**3))) * u  # float64
    got = gemm(x.to(device), w.to(device), bias=None if b is None else b.to(device), epilogue="geglu").cpu()
    assert got.shape == (m, i) and got.dtype == dtype
    err = (got.double() - ref).abs()
    assert (err <= ulp(dtype, ref) + 1e-4 * ref.abs().max()).all(), err.max()
    # not the swiglu epilogue: silu and tanh-gelu differ by far more than rounding here
    silu = gemm(x.to(device), w.to(device), bias=None if b is None else b.to(device), epilogue="swiglu").cpu()
    assert (silu.double() - ref).abs().max() > 10 * err.max()
    assert torch.allclose(gemm_ref(x, w, b, epilogue="geglu").double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, k, i", [(5, 96, 80), (1, 64, 128)])
def test_gemm_geglu_erf_is_the_exact_gelu(device, m, k, i):
    # Gemma 1's hidden_act "gelu": 0.5 g (1 + erf(g / sqrt 2)) * u. In an fp32 output the tanh
    # approximation's difference (up to ~5e-4 of g) shows far above the accumulation noise.
    torch.manual_seed(4)
    x = (torch.randn(m, k) * 2).to(torch.bfloat16)
    w = (torch.randn(k, 2 * i) / k**0.5).to(torch.bfloat16)
    y = x.double() @ w.double()
    g, u = y[:, :i], y[:, i:]
    ref = 0.5 * g * (1 + torch.special.erf(g / 2**0.5)) * u  # float64
    got = gemm(x.to(device), w.to(device), epilogue="geglu_erf", out_dtype=torch.float32).cpu().double()
    assert got.shape == (m, i)
    err = (got - ref).abs().max()
    assert err <= 2e-5 * ref.abs().max(), err
    tanh = gemm(x.to(device), w.to(device), epilogue="geglu", out_dtype=torch.float32).cpu().double()
    assert (tanh - ref).abs().max() > 10 * err
    assert torch.allclose(gemm_ref(x, w, epilogue="geglu_erf").double(), ref, rtol=1e-5, atol=1e-5)
    # the bf16 output: one rounding
    bf = gemm(x.to(device), w.to(device), epilogue="geglu_erf").cpu()
    assert ((bf.double() - ref).abs() <= ulp(torch.bfloat16, ref) + 1e-4 * ref.abs().max()).all()


def test_gemm_geglu_refuses_odd_columns(device):
    with pytest.raises(ValueError, match="geglu weight has 7 columns"):
        gemm(torch.randn(2, 16).to(device), torch.randn(16, 7).to(torch.bfloat16).to(device), epilogue="geglu")


def _bind(module, layer):
    import types

    module.forward = types.MethodType(getattr(layers, layer).forward, module)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma_layers_match_transformers(device, dtype):
    """GemmaRMSNorm (packing 1 + w from the module's own weight) and GeGLUMLP against the stock
    Gemma2 modules in the same dtype, both against the float64 module."""
    torch.manual_seed(4)
    cfg = Gemma2Config(hidden_size=96, intermediate_size=80, num_attention_heads=3, num_key_value_heads=1, head_dim=32)
    mlp = Gemma2MLP(cfg)
    for p in mlp.parameters():
        torch.nn.init.normal_(p, std=0.1)
    x = torch.randn(3, 5, 96)
    want64 = mlp.double()(x.double())
    stock = Gemma2MLP(cfg).to(dtype)
    stock.load_state_dict(mlp.state_dict())
    ours = Gemma2MLP(cfg).to(dtype).to(device)
    ours.load_state_dict(mlp.state_dict())
    _bind(ours, "GeGLUMLP")
    with torch.no_grad():
        s, o = stock(x.to(dtype)), ours(x.to(dtype).to(device)).cpu()
    assert o.dtype == dtype and getattr(ours, "xpuinject_gate_up_weight", None) is not None
    assert (o.double() - want64).abs().mean() <= 1.5 * (s.double() - want64).abs().mean() + 1e-6

    norm = Gemma2RMSNorm(96, eps=EPS)
    with torch.no_grad():
        norm.weight.copy_(gemma_w(96))
    ours_n = Gemma2RMSNorm(96, eps=EPS).to(dtype).to(device)
    ours_n.load_state_dict(norm.state_dict())
    _bind(ours_n, "GemmaRMSNorm")
    with torch.no_grad():
        got = ours_n(x.to(dtype).to(device)).cpu()
    packed = ours_n.xpuinject_norm_weight
    assert packed.dtype == torch.float32 and torch.equal(packed.cpu(), 1.0 + ours_n.weight.float().cpu())
    ref = rmsnorm.rms_norm_gemma_ref(x.to(dtype), norm.weight.to(dtype), EPS)
    assert (got.double() - ref).abs().max() <= ulp(dtype, ref).max()


def test_phi3_fused_layers_pack_from_fused_children(device):
    """FusedSwiGLUMLP and FusedAttention pack Phi-3's fused gate_up_proj and qkv_proj as they are
    (the split is along the output rows, as concat-gate-up / concat-qkv lay it out)."""
    torch.manual_seed(5)
    cfg = Phi3Config(hidden_size=240, intermediate_size=64, num_attention_heads=3, num_key_value_heads=1)
    mlp = Phi3MLP(cfg).to(torch.bfloat16).to(device)
    x = torch.randn(2, 7, 240).to(torch.bfloat16).to(device)
    with torch.no_grad():
        want = mlp(x)
        _bind(mlp, "FusedSwiGLUMLP")
        got = mlp(x)
    assert torch.equal(mlp.xpuinject_gate_up_weight, mlp.gate_up_proj.weight.t().contiguous())
    assert (got.float() - want.float()).abs().max() <= 0.02 * want.float().abs().max()
    attn = Phi3Attention(cfg, layer_idx=0).to(torch.bfloat16)
    packed = packing._attention(attn)
    assert torch.equal(packed["qkv_weight"], attn.qkv_proj.weight.t().contiguous()) and packed["qkv_weight"].shape == (240, 400)


def _window_mask(s, window, dtype):
    """transformers' additive mask for a causal layer, windowed when window is set."""
    i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
    keep = (j <= i) & ((j > i - window) if window else True)
    return torch.where(keep, torch.zeros((), dtype=dtype), torch.full((), torch.finfo(dtype).min, dtype=dtype))[None, None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family, layer_idx", [("gemma2", 0), ("gemma2", 1), ("gemma3", 0)])
def test_gemma_attention_on_our_kernels(device, dtype, family, layer_idx):
    """Our Attention layer bound on Gemma2Attention (query_pre_attn_scalar scaling, tanh logit
    soft-capping, a sliding window shorter than the sequence on layer 0) and on Gemma3Attention
    (its q/k norms in the (1 + w) form, bound to GemmaRMSNorm), against the float64 module:
    within the stock module's own error in the same dtype. GQA 3, head_dim 80."""
    from transformers import Gemma3TextConfig
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2RotaryEmbedding
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3RotaryEmbedding

    torch.manual_seed(6)
    common = dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1, head_dim=80, sliding_window=5,
                  layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=48,
                  attn_implementation="eager")
    if family == "gemma2":
        cfg = Gemma2Config(attn_logit_softcapping=3.0, **common)  # a cap the scores reach
        cls, rot = Gemma2Attention, Gemma2RotaryEmbedding(cfg)
    else:
        cfg = Gemma3TextConfig(**common)
        cls, rot = Gemma3Attention, Gemma3RotaryEmbedding(cfg)
    ref = cls(cfg, layer_idx=layer_idx).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2))
    s = 11
    x = torch.randn(2, s, 96, dtype=torch.float64) * 2
    pos = torch.arange(s)[None].expand(2, s)
    window = cfg.sliding_window if ref.sliding_window else None
    if family == "gemma2":
        assert ref.attn_logit_softcapping == 3.0 and ref.scaling == 48 ** -0.5
    rope_kw = {} if family == "gemma2" else {"layer_type": cfg.layer_types[layer_idx]}

    def run(m, dt, dev):
        cos, sin = rot(x.to(dt), pos, **rope_kw)
        with torch.no_grad():
            out, _ = m(x.to(dt).to(dev), position_embeddings=(cos.to(dev), sin.to(dev)),
                       attention_mask=_window_mask(s, window, dt).to(dev))
        return out.cpu().double()

    want = run(ref, torch.float64, "cpu")
    stock = cls(cfg, layer_idx=layer_idx).to(dtype).eval()
    stock.load_state_dict(ref.state_dict())
    got_stock = run(stock, dtype, "cpu")
    ours = cls(cfg, layer_idx=layer_idx).to(dtype).to(device).eval()
    ours.load_state_dict(ref.state_dict())
    _bind(ours, "Attention")
    if family == "gemma3":
        _bind(ours.q_norm, "GemmaRMSNorm")
        _bind(ours.k_norm, "GemmaRMSNorm")
    got = run(ours, dtype, device)
    assert getattr(ours, "xpuinject_qkv_weight", None) is not None  # our layer ran, on its packed weight
    if family == "gemma3":
        assert ours.q_norm.xpuinject_norm_weight.dtype == torch.float32
    err, err_stock = (got - want).abs(), (got_stock - want).abs()
    assert err.mean() <= 1.2 * err_stock.mean() + 1e-6, (err.mean(), err_stock.mean())
    assert err.max() <= 2 * err_stock.max() + 1e-6, (err.max(), err_stock.max())
    # the variants matter at these shapes: without the cap, or without the window, the output moves
    if family == "gemma2" or window:
        plain = cls(cfg, layer_idx=layer_idx).double().eval()
        plain.load_state_dict(ref.state_dict())
        plain.attn_logit_softcapping, plain.sliding_window = None, None
        cos, sin = rot(x, pos, **rope_kw)
        with torch.no_grad():
            other = plain(x, position_embeddings=(cos, sin), attention_mask=_window_mask(s, None, torch.float64))[0]
        assert (other - want).abs().mean() > 10 * err.mean()


@pytest.mark.parametrize("dtype", DTYPES)
def test_phi3_partial_rotary_attention_on_our_kernels(device, dtype):
    """FusedAttention on a Phi3Attention with Phi-4-mini's partial_rotary_factor 0.75 (60 of 80
    channels rotate) and a sliding window shorter than the sequence, GQA 3, against the float64
    module: within the stock module's own error in the same dtype."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    torch.manual_seed(7)
    cfg = Phi3Config(hidden_size=240, num_attention_heads=3, num_key_value_heads=1, sliding_window=6,
                     pad_token_id=0, attn_implementation="eager",
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75})
    rot = Phi3RotaryEmbedding(cfg)
    ref = Phi3Attention(cfg, layer_idx=0).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.15)
    s = 13
    x = torch.randn(2, s, 240, dtype=torch.float64)
    pos = torch.arange(s)[None].expand(2, s)

    def run(m, dt, dev):
        cos, sin = rot(x.to(dt), pos)
        assert cos.shape[-1] == 60
        with torch.no_grad():
            out, _ = m(x.to(dt).to(dev), position_embeddings=(cos.to(dev), sin.to(dev)),
                       attention_mask=_window_mask(s, cfg.sliding_window, dt).to(dev))
        return out.cpu().double()

    want = run(ref, torch.float64, "cpu")
    stock = Phi3Attention(cfg, layer_idx=0).to(dtype).eval()
    stock.load_state_dict(ref.state_dict())
    ours = Phi3Attention(cfg, layer_idx=0).to(dtype).to(device).eval()
    ours.load_state_dict(ref.state_dict())
    _bind(ours, "FusedAttention")
    got, got_stock = run(ours, dtype, device), run(stock, dtype, "cpu")
    assert getattr(ours, "xpuinject_qkv_weight", None) is not None
    err, err_stock = (got - want).abs(), (got_stock - want).abs()
    assert err.mean() <= 1.2 * err_stock.mean() + 1e-6, (err.mean(), err_stock.mean())
    assert err.max() <= 2 * err_stock.max() + 1e-6, (err.max(), err_stock.max())
    # rotating all 80 channels instead would be far off: the partial rotation is what we matched
    cfg_full = Phi3Config(**{**cfg.to_dict(), "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})
    with torch.no_grad():
        other = ref(x, position_embeddings=Phi3RotaryEmbedding(cfg_full)(x, pos),
                    attention_mask=_window_mask(s, cfg.sliding_window, torch.float64))[0]
    assert (other - want).abs().mean() > 10 * err.mean()


@pytest.mark.parametrize("dtype", DTYPES)
def test_fp32_rms_norm_is_olmo2s_norm(device, dtype):
    """FP32RMSNorm bound on an Olmo2RMSNorm: the weight multiplies the unrounded fp32 row and the
    product rounds once, what the stock module computes (up to the order of the variance sum),
    within half an ulp of the float64 norm; Llama's order (round, then multiply) is further."""
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

    torch.manual_seed(9)
    n = 200
    x = (torch.randn(4, 9, n) * 3).to(dtype)
    m = Olmo2RMSNorm(n, eps=EPS).to(dtype)
    with torch.no_grad():
        m.weight.copy_((1 + gemma_w(n)).to(dtype))
        want = m(x)
    ours = Olmo2RMSNorm(n, eps=EPS).to(dtype).to(device)
    ours.load_state_dict(m.state_dict())
    _bind(ours, "FP32RMSNorm")
    with torch.no_grad():
        got = ours(x.to(device)).cpu()
    assert got.dtype == dtype and not hasattr(ours, "xpuinject_norm_weight")  # the module's own weight
    assert (got != want).float().mean().item() < 0.01
    assert (got.double() - want.double()).abs().max() <= ulp(dtype, want.double()).max()
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * m.weight.double()
    err = (got.double() - ref).abs()
    assert (err <= 0.5 * ulp(dtype, ref) + 1e-5 * ref.abs() + 1e-6).all(), err.max()
    llama = rmsnorm.rms_norm(x.to(device), m.weight.to(device), EPS).cpu()
    assert (llama.double() - ref).abs().mean() > err.mean()


@pytest.mark.parametrize("dtype", DTYPES)
def test_olmo2_attention_on_our_kernels(device, dtype):
    """Our Attention on an Olmo2Attention, whose q_norm and k_norm span every head of the
    projection (6 query heads, 2 KV heads, head_dim 32), bound to FP32RMSNorm: prefill without a
    cache, then a static cache's prefill and two decode steps, against the float64 module within
    the stock module's own error in the same dtype. The norms run as two launches a forward, not
    inside the RoPE or QKV launch (those normalize one head at a time); a norm per head instead
    moves the output far more than that error."""
    import transformers
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2RotaryEmbedding

    from xpuinject_kernels import _backend

    torch.manual_seed(10)
    cfg = Olmo2Config(hidden_size=192, num_hidden_layers=1, num_attention_heads=6, num_key_value_heads=2,
                      vocab_size=97, max_position_embeddings=64, rms_norm_eps=EPS)
    ref = Olmo2Attention(cfg, layer_idx=0).double().eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    assert ref.q_norm.weight.shape == (192,) and ref.k_norm.weight.shape == (64,)
    rot = Olmo2RotaryEmbedding(cfg)
    s, length = 7, 10
    x = torch.randn(2, s + 2, 192, dtype=torch.float64) * 2

    def run(m, dt, dev, cached):
        cache = transformers.StaticCache(config=cfg, max_cache_len=length) if cached else None
        spans = ((0, s), (s, s + 1), (s + 1, s + 2)) if cached else ((0, s),)
        outs = []
        for lo, hi in spans:
            pos = torch.arange(lo, hi)[None].expand(2, hi - lo)
            cos, sin = rot(x.to(dt), pos)
            width = length if cached else hi
            keep = torch.arange(width)[None, :] <= torch.arange(lo, hi)[:, None]
            mask = torch.where(keep, torch.zeros((), dtype=dt), torch.full((), torch.finfo(dt).min, dtype=dt))[None, None]
            with torch.no_grad():
                out, _ = m(x[:, lo:hi].to(dt).to(dev), position_embeddings=(cos.to(dev), sin.to(dev)),
                           attention_mask=mask.to(dev), past_key_values=cache)
            outs.append(out.cpu().double())
        return torch.cat(outs, dim=1)

    stock = Olmo2Attention(cfg, layer_idx=0).to(dtype).eval()
    stock.load_state_dict(ref.state_dict())
    ours = Olmo2Attention(cfg, layer_idx=0).to(dtype).to(device).eval()
    ours.load_state_dict(ref.state_dict())
    _bind(ours, "Attention")
    _bind(ours.q_norm, "FP32RMSNorm")
    _bind(ours.k_norm, "FP32RMSNorm")
    counts = _backend.launch_counts
    for cached in (False, True):
        want = run(ref, torch.float64, "cpu", cached)
        got_stock = run(stock, dtype, "cpu", cached)
        before = dict(counts)
        got = run(ours, dtype, device, cached)
        ran = {k: counts[k] - before.get(k, 0) for k in ("rms_norm_gemma", "qkv_rope_cache_write", "rope_cache_write")}
        forwards = 3 if cached else 1
        assert ran["rms_norm_gemma"] == 2 * forwards and ran["qkv_rope_cache_write"] == 0, ran
        assert ran["rope_cache_write"] == (forwards if cached else 0), ran
        err, err_stock = (got - want).abs(), (got_stock - want).abs()
        assert err.mean() <= 1.2 * err_stock.mean() + 1e-6, (cached, err.mean(), err_stock.mean())
        assert err.max() <= 2 * err_stock.max() + 1e-6, (cached, err.max(), err_stock.max())
    per_head = Olmo2Attention(cfg, layer_idx=0).double().eval()
    per_head.load_state_dict(ref.state_dict())
    hd = per_head.head_dim

    def head_norm(t, w):  # each head over its own head_dim, as Qwen3's norms are
        h = t.unflatten(-1, (-1, hd))
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).flatten(-2) * w

    for name in ("q_norm", "k_norm"):
        getattr(per_head, name).forward = lambda t, w=getattr(ref, name).weight: head_norm(t, w)
    other = run(per_head, torch.float64, "cpu", False)
    assert (other - run(ref, torch.float64, "cpu", False)).abs().mean() > 10 * err.mean()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [96, 200, 12000])  # 12000: wider than one block (the two-pass loop)
@pytest.mark.parametrize("op, norm_op, module", [
    ("rms_norm_fp32_add", "rms_norm_gemma", "olmo2.modeling_olmo2.Olmo2RMSNorm"),  # the weight times the fp32 row
    ("rms_norm_add", "rms_norm", "llama.modeling_llama.LlamaRMSNorm"),  # rounded before the weight
])
def test_norm_add_rounds_as_the_block(device, dtype, n, op, norm_op, module):
    """rms_norm_fp32_add = residual + Olmo2RMSNorm(x), rms_norm_add = residual + LlamaRMSNorm(x): the
    norm rounded to x's dtype and the sum rounded again (what the stock block's torch add of the two
    computes): against those two steps on the kernel's own norm bit for bit, against the stock
    module within one ulp; and the two orders differ on many elements at bf16."""
    import importlib

    path, cls = module.rsplit(".", 1)
    Norm = getattr(importlib.import_module(f"transformers.models.{path}"), cls)
    torch.manual_seed(11)
    x = (torch.randn(3, 5, n) * 3).to(dtype)
    residual = (torch.randn(3, 5, n) * 4).to(dtype)
    w = (1 + gemma_w(n)).to(dtype)
    args = (x.to(device), residual.to(device), w.to(device), EPS)
    got = getattr(rmsnorm, op)(*args).cpu()
    normed = getattr(rmsnorm, norm_op)(x.to(device), w.to(device), EPS).cpu()
    assert got.dtype == dtype and torch.equal(got, normed + residual)
    m = Norm(n, eps=EPS).to(dtype)
    with torch.no_grad():
        m.weight.copy_(w)
        want = residual + m(x)
    assert (got.double() - want.double()).abs().max() <= ulp(dtype, want.double()).max()
    if dtype == torch.bfloat16:
        other = (rmsnorm.rms_norm_add if op == "rms_norm_fp32_add" else rmsnorm.rms_norm_fp32_add)(*args).cpu()
        assert (other != got).float().mean() > 0.01
    with pytest.raises(ValueError, match="residual shape"):
        getattr(rmsnorm, op)(x.to(device), residual[:, :2].to(device), w.to(device), EPS)


def _random_block(block, device):
    """A decoder block with norm weights around 1 and the rest around 0, in bf16 on device."""
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    return block.to(torch.bfloat16).to(device)


def _patched_block_counts(block, rotary, device, ops, layer):
    """Runs block on one fixed causal 2 x 7 x 96 input as it is, then with its forward bound to
    our `layer`; asserts the two outputs equal bit for bit and returns how many times each of ops
    launched in each run (stock block, patched block)."""
    from xpuinject_kernels import _backend

    x = (torch.randn(2, 7, 96) * 2).to(torch.bfloat16).to(device)
    cos, sin = rotary(x.cpu(), torch.arange(7)[None].expand(2, 7))
    mask = torch.ones(7, 7, dtype=torch.bool).tril()[None, None].to(device)
    kw = dict(attention_mask=mask, position_embeddings=(cos.to(device), sin.to(device)))
    counts = _backend.launch_counts

    def run():
        before = dict(counts)
        with torch.no_grad():
            out = block(x, **kw)
        out = out[0] if isinstance(out, tuple) else out
        return out, {k: counts[k] - before.get(k, 0) for k in ops}

    want, want_n = run()
    _bind(block, layer)
    got, got_n = run()
    assert torch.equal(got, want), float((got.float() - want.float()).abs().max())
    return want_n, got_n


def test_post_norm_decoder_layer_matches_olmo2s_block(device):
    """PostNormDecoderLayer on an Olmo2DecoderLayer (its attention, MLP and norms bound to our
    layers too) against the same modules under the stock block: bit for bit (each norm and its add
    rounded as the stock block rounds them, the norm by the same kernel), two launches fewer a
    layer."""
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2DecoderLayer, Olmo2RotaryEmbedding

    torch.manual_seed(12)
    cfg = Olmo2Config(hidden_size=96, intermediate_size=88, num_hidden_layers=1, num_attention_heads=3,
                      num_key_value_heads=3, vocab_size=97, max_position_embeddings=64, rms_norm_eps=EPS)
    block = Olmo2DecoderLayer(cfg, layer_idx=0).eval()
    block = _random_block(block, device)
    _bind(block.self_attn, "Attention")
    _bind(block.mlp, "SwiGLUMLP")
    for norm in (block.self_attn.q_norm, block.self_attn.k_norm, block.post_attention_layernorm,
                 block.post_feedforward_layernorm):
        _bind(norm, "FP32RMSNorm")
    want_n, got_n = _patched_block_counts(block, Olmo2RotaryEmbedding(cfg), device, ("rms_norm_gemma", "rms_norm_fp32_add"),
                                          "PostNormDecoderLayer")
    assert want_n == {"rms_norm_gemma": 4, "rms_norm_fp32_add": 0}, want_n
    assert got_n == {"rms_norm_gemma": 2, "rms_norm_fp32_add": 2}, got_n  # the q/k norms stay apart


@pytest.mark.parametrize("layer_idx", [0, 1])  # sliding with RoPE; global, no RoPE
def test_post_norm_decoder_layer_matches_exaone4s_block(device, layer_idx):
    """PostNormDecoderLayer on an Exaone4DecoderLayer (Llama's norms after each branch, per-head q/k
    norms; its attention, MLP and norms bound to our layers too) against the same modules under
    the stock block: bit for bit (each norm and its add in one rms_norm_add, rounded as the stock
    block rounds them), two launches fewer a layer, on a sliding and on a global layer."""
    from transformers import Exaone4Config
    from transformers.models.exaone4.modeling_exaone4 import Exaone4DecoderLayer, Exaone4RotaryEmbedding

    torch.manual_seed(14)
    cfg = Exaone4Config(hidden_size=96, intermediate_size=88, num_hidden_layers=2, num_attention_heads=3,
                        num_key_value_heads=1, vocab_size=97, max_position_embeddings=64, rms_norm_eps=EPS,
                        sliding_window=4, sliding_window_pattern=2)
    block = Exaone4DecoderLayer(cfg, layer_idx=layer_idx).eval()
    assert block.self_attn.is_sliding == (layer_idx == 0) and block.self_attn.sliding_window == 4
    block = _random_block(block, device)
    _bind(block.self_attn, "Attention")
    _bind(block.mlp, "SwiGLUMLP")
    for norm in (block.self_attn.q_norm, block.self_attn.k_norm, block.post_attention_layernorm,
                 block.post_feedforward_layernorm):
        _bind(norm, "RMSNorm")
    want_n, got_n = _patched_block_counts(block, Exaone4RotaryEmbedding(cfg), device, ("rms_norm", "rms_norm_add", "rms_norm_fp32_add"),
                                          "PostNormDecoderLayer")
    assert want_n == {"rms_norm": 2, "rms_norm_add": 0, "rms_norm_fp32_add": 0}, want_n
    assert got_n == {"rms_norm": 0, "rms_norm_add": 2, "rms_norm_fp32_add": 0}, got_n


@pytest.mark.parametrize("fixture, replaced", [
    ("olmo2-tiny", {"FP32RMSNorm", "PostNormDecoderLayer", "Attention"}),
    ("exaone4-tiny", {"RMSNorm", "PostNormDecoderLayer", "Attention"}),
    ("hunyuan-tiny", {"RMSNorm", "DecoderLayer", "Attention"}),
    ("helium-tiny", {"FP32RMSNorm", "DecoderLayer", "Attention"}),
    ("flex_olmo-tiny", {"FP32RMSNorm", "PostNormMoEDecoderLayer", "Attention", "SparseMoE"}),
    ("granitemoe-tiny", {"RMSNorm", "ScaledMoEDecoderLayer", "Attention", "RouterMoE"}),
])
def test_qk_norm_model_compiles_as_one_graph(llama_odd_pkg, device, fixture, replaced):
    """The olmo2, exaone4, hunyuan and helium fixtures kernelized (their norms, the q/k norms
    inside Attention, PostNormDecoderLayer's norm + add ops; EXAONE 4's sliding and global NoPE
    layers; HunYuan's q/k norms after RoPE; Helium's add + fp32-weight norm in DecoderLayer and
    its q/k rows reordered on the device; FlexOlmo's post-norm block around the sparse MoE block)
    trace with fullgraph=True and compute what eager does, bit for bit."""
    from pathlib import Path

    import transformers

    torch._dynamo.reset()
    fixtures = Path(__file__).resolve().parents[2] / "testdata" / "fixtures"
    model = transformers.AutoModelForCausalLM.from_pretrained(fixtures / fixture, dtype=torch.bfloat16).eval().to(device)
    if fixture == "hunyuan-tiny":
        # stock's dynamic RoPE tests the length on the host, which no full graph traces, ours or
        # not; within the original length its frequencies are the default type's
        model.model.rotary_emb.rope_type = "default"
    summary = llama_odd_pkg.kernelize(model)
    assert replaced <= set(summary["replaced"])
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    ids = torch.randint(3, 500, (2, 9), generator=torch.Generator().manual_seed(5)).to(device)
    with torch.no_grad():
        want, got = model(input_ids=ids).logits, compiled(input_ids=ids).logits
    torch._dynamo.reset()
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_glm_interleaved_rotary_attention_on_our_kernels(device, dtype, monkeypatch):
    """Attention on a Glm4Attention: RoPE over 40 of 80 channels in adjacent pairs (2i, 2i+1),
    q/k/v biases, GQA 3. Packing reorders the q and k rows (and biases) to rotate-half order, so
    our rotate-half kernels compute GLM's rotation: within the stock module's own error against
    the float64 module. Packed without the reorder, the same kernels are far off."""
    from transformers import Glm4Config
    from transformers.models.glm4.modeling_glm4 import Glm4Attention, Glm4RotaryEmbedding

    torch.manual_seed(11)
    cfg = Glm4Config(hidden_size=96, num_attention_heads=3, num_key_value_heads=1, head_dim=80, pad_token_id=0,
                     attn_implementation="eager")
    rot = Glm4RotaryEmbedding(cfg)
    ref = Glm4Attention(cfg, layer_idx=0).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.15)
    s = 11
    x = torch.randn(2, s, 96, dtype=torch.float64)
    pos = torch.arange(s)[None].expand(2, s)
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)[None, None]

    def run(m, dt, dev):
        cos, sin = rot(x.to(dt), pos)
        assert cos.shape[-1] == 40
        with torch.no_grad():
            out, _ = m(x.to(dt).to(dev), position_embeddings=(cos.to(dev), sin.to(dev)),
                       attention_mask=mask.to(dt).to(dev))
        return out.cpu().double()

    def ours():
        m = Glm4Attention(cfg, layer_idx=0).to(dtype).to(device).eval()
        m.load_state_dict(ref.state_dict())
        _bind(m, "Attention")
        return m

    want = run(ref, torch.float64, "cpu")
    stock = Glm4Attention(cfg, layer_idx=0).to(dtype).eval()
    stock.load_state_dict(ref.state_dict())
    got, got_stock = run(ours(), dtype, device), run(stock, dtype, "cpu")
    err, err_stock = (got - want).abs(), (got_stock - want).abs()
    assert err.mean() <= 1.2 * err_stock.mean() + 1e-6, (err.mean(), err_stock.mean())
    assert err.max() <= 2 * err_stock.max() + 1e-6, (err.max(), err_stock.max())
    monkeypatch.setattr(packing, "INTERLEAVED_ROTARY", ())
    unordered = run(ours(), dtype, device)
    assert (unordered - want).abs().mean() > 10 * err.mean()


def _run_attention(m, rot, x, pos, mask, dt, dev):
    """An attention module's float64 output on x (cast to dt, on dev) at positions pos, cos/sin
    from the rotary module rot, under the additive mask."""
    cos, sin = rot(x.to(dt), pos)
    with torch.no_grad():
        out, _ = m(x.to(dt).to(dev), position_embeddings=(cos.to(dev), sin.to(dev)), attention_mask=mask.to(dt).to(dev))
    return out.cpu().double()


@pytest.mark.parametrize("layer_idx", [0, 1])  # sliding with RoPE; global, no RoPE
def test_exaone4_attention_rotates_only_its_sliding_layers(device, layer_idx):
    """Attention on an Exaone4Attention, which keeps config.sliding_window on every layer: the
    sliding layer rotates q and k, the global one (not is_sliding) rotates nothing, as
    Exaone4Attention.forward does; each within the stock bf16 module's error against the float64
    module. Rotating the global layer (the window's mere presence read as a sliding layer's) is
    far off."""
    from transformers import Exaone4Config
    from transformers.models.exaone4.modeling_exaone4 import Exaone4Attention, Exaone4RotaryEmbedding
    from xpuinject_kernels import decoder

    torch.manual_seed(15)
    cfg = Exaone4Config(hidden_size=96, num_attention_heads=3, num_key_value_heads=1, num_hidden_layers=2,
                        sliding_window=64, sliding_window_pattern=2, attn_implementation="eager")
    rot = Exaone4RotaryEmbedding(cfg)
    ref = Exaone4Attention(cfg, layer_idx=layer_idx).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.15 + (1.0 if p.dim() == 1 else 0.0))
    assert decoder._rotates(ref) == (layer_idx == 0) and decoder._window(ref) == (64 if layer_idx == 0 else None)
    s = 11
    x = torch.randn(2, s, 96, dtype=torch.float64)
    pos = torch.arange(5, 5 + s)[None].expand(2, s)
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)[None, None]

    def run(m, dt, dev):
        return _run_attention(m, rot, x, pos, mask, dt, dev)

    def make(dt, dev):
        m = Exaone4Attention(cfg, layer_idx=layer_idx).to(dt).to(dev).eval()
        m.load_state_dict(ref.state_dict())
        return m

    want = run(ref, torch.float64, "cpu")
    ours = make(torch.bfloat16, device)
    _bind(ours, "Attention")
    got, got_stock = run(ours, torch.bfloat16, device), run(make(torch.bfloat16, "cpu"), torch.bfloat16, "cpu")
    err, err_stock = (got - want).abs(), (got_stock - want).abs()
    assert err.mean() <= 1.2 * err_stock.mean() + 1e-6, (err.mean(), err_stock.mean())
    assert err.max() <= 2 * err_stock.max() + 1e-6, (err.max(), err_stock.max())
    if layer_idx == 1:
        ours.is_sliding = True  # read as a sliding layer: rotated
        assert (run(ours, torch.bfloat16, device) - want).abs().mean() > 10 * err.mean()


@pytest.mark.parametrize("norms", ["ours", "stock"])
def test_hunyuan_attention_normalizes_after_rope(device, norms, monkeypatch):
    """Attention on a HunYuanDenseV1Attention, whose query_layernorm and key_layernorm normalize the
    rotated heads: with the norms bound to our RMSNorm they run inside the RoPE launch after the
    rotation, as stock modules they run after our rotation; each within the stock bf16 module's
    error against the float64 module. Normalized before the rotation, as Qwen3's are, it is far
    off (the weights differ across each rotated pair)."""
    from transformers import HunYuanDenseV1Config
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import (
        HunYuanDenseV1Attention, HunYuanDenseV1RotaryEmbedding)
    from xpuinject_kernels import _backend, decoder

    torch.manual_seed(16)
    cfg = HunYuanDenseV1Config(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=32,
                               num_hidden_layers=1, attention_bias=True, attn_implementation="eager")
    rot = HunYuanDenseV1RotaryEmbedding(cfg)
    ref = HunYuanDenseV1Attention(cfg, layer_idx=0).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            norm = p.dim() == 1 and p.numel() == 32  # the q/k norms' weights: far from 1, unlike across pairs
            p.copy_(1.0 + 0.5 * torch.randn_like(p) if norm else torch.randn_like(p) * 0.15)
    s = 11
    x = torch.randn(2, s, 96, dtype=torch.float64)
    pos = torch.arange(3, 3 + s)[None].expand(2, s)
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)[None, None]

    def run(m, dt, dev):
        return _run_attention(m, rot, x, pos, mask, dt, dev)

    def make(dt, dev):
        m = HunYuanDenseV1Attention(cfg, layer_idx=0).to(dt).to(dev).eval()
        m.load_state_dict(ref.state_dict())
        return m

    want = run(ref, torch.float64, "cpu")
    ours = make(torch.bfloat16, device)
    _bind(ours, "Attention")
    if norms == "ours":
        _bind(ours.query_layernorm, "RMSNorm")
        _bind(ours.key_layernorm, "RMSNorm")
    assert decoder._qk_norm_modules(ours)[2]
    before = _backend.launch_counts["apply_rope.norm"]
    got, got_stock = run(ours, torch.bfloat16, device), run(make(torch.bfloat16, "cpu"), torch.bfloat16, "cpu")
    assert _backend.launch_counts["apply_rope.norm"] == before + (norms == "ours")
    err, err_stock = (got - want).abs(), (got_stock - want).abs()
    assert err.mean() <= 1.2 * err_stock.mean() + 1e-6, (err.mean(), err_stock.mean())
    assert err.max() <= 2 * err_stock.max() + 1e-6, (err.max(), err_stock.max())
    if norms == "ours":  # the same norms read as Qwen3's q_norm / k_norm: before the rotation
        ours.q_norm, ours.k_norm = ours.query_layernorm, ours.key_layernorm
        monkeypatch.setattr(decoder, "QK_NORMS_AFTER_ROPE", ())
        assert (run(ours, torch.bfloat16, device) - want).abs().mean() > 10 * err.mean()


def test_glm4_model_kernelized_compiles_as_one_graph(llama_odd_pkg, device):
    """The glm4 fixture kernelized with no offline pack (the q/k rows reordered as the layers pack
    them on the device): its logits as close to the float32 model's as stock bf16's, and it traces
    with fullgraph=True computing what eager does, bit for bit."""
    from pathlib import Path

    import transformers

    torch._dynamo.reset()
    path = Path(__file__).resolve().parents[2] / "testdata" / "fixtures" / "glm4-tiny"
    ids = torch.randint(3, 500, (2, 23), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()(input_ids=ids).logits
        stock = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()(input_ids=ids).logits
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval().to(device)
    summary = llama_odd_pkg.kernelize(model)
    assert {"Attention", "FusedSwiGLUMLP", "RMSNorm"} <= set(summary["replaced"]), summary
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        want, got = model(input_ids=ids.to(device)).logits, compiled(input_ids=ids.to(device)).logits
    torch._dynamo.reset()
    assert torch.equal(got, want)
    err, err_stock = (want.cpu().float() - ref).abs(), (stock.float() - ref).abs()
    assert err.mean() <= 1.1 * err_stock.mean(), (err.mean(), err_stock.mean())


def test_sandwich_decoder_layer_matches_glm4s_block(device):
    """SandwichDecoderLayer on a Glm4DecoderLayer (attention, MLP and norms bound to our layers too)
    against the same modules under the stock block: bit for bit (the add and the post-attention
    norm in one kernel round as the stock add and norm do, the post-MLP norm and the add after it in
    another), two launches fewer a layer."""
    from transformers import Glm4Config
    from transformers.models.glm4.modeling_glm4 import Glm4DecoderLayer, Glm4RotaryEmbedding

    torch.manual_seed(13)
    cfg = Glm4Config(hidden_size=96, intermediate_size=88, num_hidden_layers=1, num_attention_heads=3,
                     num_key_value_heads=1, head_dim=80, vocab_size=97, max_position_embeddings=64, rms_norm_eps=EPS,
                     pad_token_id=0)
    block = Glm4DecoderLayer(cfg, layer_idx=0).eval()
    block = _random_block(block, device)
    _bind(block.self_attn, "Attention")
    _bind(block.mlp, "FusedSwiGLUMLP")
    for norm in (block.input_layernorm, block.post_self_attn_layernorm, block.post_attention_layernorm,
                 block.post_mlp_layernorm):
        _bind(norm, "RMSNorm")
    want_n, got_n = _patched_block_counts(block, Glm4RotaryEmbedding(cfg), device, ("rms_norm", "add_rms_norm", "rms_norm_add"),
                                          "SandwichDecoderLayer")
    assert want_n == {"rms_norm": 4, "add_rms_norm": 0, "rms_norm_add": 0}, want_n
    assert got_n == {"rms_norm": 2, "add_rms_norm": 1, "rms_norm_add": 1}, got_n
