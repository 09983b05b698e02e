"""GEMM on K-major packed weights: every epilogue on both memory paths (tensor descriptors and
block pointers), odd / misaligned shapes, against a bf16-mirroring oracle and the fp32 reference;
config builders and pruning per backend."""

import importlib

import pytest
import torch
import triton

import metrics
from xpuinject_kernels import _backend

# the package exports the function `gemm`, which shadows the submodule attribute of the same name
G = importlib.import_module("xpuinject_kernels.gemm")

BF16_ULP = 2.0**-7


def coord(shape, a, b, scale=1.0):
    return scale * metrics.coord_tensor(shape, a=a, b=b)


def make_inputs(m_shape, k, n_w, kind, dtype, device, epilogue):
    """x [..., k], W [k, n_w] as fp32 masters plus their bf16/dtype copies on the device."""
    if kind == "coord":
        x32 = coord(tuple(m_shape) + (k,), 0.37, 0.11)
        w32 = coord((k, n_w), 0.23, 0.07, scale=0.2)
    else:
        x32 = torch.randn(tuple(m_shape) + (k,))
        w32 = torch.randn(k, n_w) * 0.2
    b32 = coord((n_w,), 0.0, 0.31, scale=0.5) if epilogue != "none" else None
    n = n_w // 2 if epilogue == "swiglu" else n_w
    r32 = coord(tuple(m_shape) + (n,), 0.05, 0.13, scale=2.0) if epilogue == "residual" else None
    to = lambda t, dt: None if t is None else t.to(dt).to(device)  # noqa: E731
    return (x32, w32, b32, r32), (to(x32, dtype), to(w32, torch.bfloat16), to(b32, torch.bfloat16), to(r32, dtype))


def oracle(x, w, b, r, epilogue):
    """Mirror the kernel's formats: the x tile is rounded to W's dtype, exact products with fp32
    accumulation, epilogue in fp32, one rounding to x.dtype."""
    xw = x.to(w.dtype)
    return G.gemm_ref(xw, w, b, r, epilogue).to(x.dtype)


def check(name, y, x, w, b, r, masters, epilogue):
    ref = oracle(x, w, b, r, epilogue)
    scale = ref.float().abs().max().item()
    # tight: one output rounding (ties may flip with fp32 summation order) plus fp32 sum noise
    metrics.assert_close(name + " vs oracle", y, ref, atol=1e-4 * scale + 1e-6, rtol=BF16_ULP)
    # user's quality: against the fp32 masters (bf16 weights/inputs + output rounding)
    x32, w32, b32, r32 = masters
    ref32 = G.gemm_ref(x32, w32, b32, r32, epilogue)
    metrics.assert_close(name + " vs fp32 ref", y, ref32, atol=3e-2 * scale, rtol=2e-2, min_cosine=0.999)


EPIS = ["none", "bias", "swiglu", "hardswish", "residual"]


@pytest.mark.parametrize("path", ["desc", "blockptr"])
@pytest.mark.parametrize("epilogue", EPIS)
@pytest.mark.parametrize("kind", ["coord", "random"])
def test_gemm_epilogues_both_paths(device, path, epilogue, kind):
    # M=5, K=40, N=48 (swiglu: I=24): partial tiles in M, N and K; all operands 16-byte aligned
    m_shape, k, n = (5,), 40, 48
    n_w = 2 * n if epilogue == "swiglu" else n
    masters, (x, w, b, r) = make_inputs(m_shape, k, n_w, kind, torch.bfloat16, device, epilogue)
    before = _backend.launch_counts["gemm." + path]
    y = G.gemm(x, w, b, r, epilogue, use_descriptors=(path == "desc"))
    assert _backend.launch_counts["gemm." + path] == before + 1
    assert y.shape == (5, n) and y.dtype == torch.bfloat16
    check(f"gemm {epilogue} {path} {kind}", y, x, w, b, r, masters, epilogue)


def test_gemm_auto_picks_descriptors_when_aligned(device):
    # M=70 (> CUDA_DESC_MIN_M, so the same holds on a CUDA run)
    masters, (x, w, b, r) = make_inputs((2, 35), 64, 96, "coord", torch.bfloat16, device, "bias")
    before = _backend.launch_counts["gemm.desc"]
    y = G.gemm(x, w, b, epilogue="bias")
    assert _backend.launch_counts["gemm.desc"] == before + 1, "aligned operands should use tensor descriptors"
    assert y.shape == (2, 35, 96)
    check("gemm auto aligned [2,35,64]x[64,96]", y, x, w, b, r, masters, "bias")


def test_descriptor_policy():
    assert not G.prefer_descriptors("cuda", 4096, False)   # misaligned: never
    assert not G.prefer_descriptors("xpu", 4096, False)
    assert G.prefer_descriptors("cuda", 4096, True)        # prefill on CUDA: descriptors
    assert not G.prefer_descriptors("cuda", 16, True)      # decode on CUDA: block pointers
    assert G.prefer_descriptors("xpu", 1, True)            # XPU: descriptors whenever aligned
    assert G.prefer_descriptors("cpu", 5, True)            # interpreter: descriptors (tested path)


@pytest.mark.parametrize("epilogue", ["bias", "residual"])
def test_gemm_misaligned_falls_back(device, epilogue):
    # K=70 bf16: x rows are 140 bytes apart (not 16-byte aligned) -> block pointers, still right
    # (21 rows: past gemv.MAX_M, so the tiled kernel takes the call)
    masters, (x, w, b, r) = make_inputs((21,), 70, 123, "coord", torch.bfloat16, device, epilogue)
    assert not _backend.tma_ok(x)
    before = _backend.launch_counts["gemm.blockptr"]
    y = G.gemm(x, w, b, r, epilogue)
    assert _backend.launch_counts["gemm.blockptr"] == before + 1
    check(f"gemm misaligned K70 N123 {epilogue}", y, x, w, b, r, masters, epilogue)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        G.gemm(x, w, b, r, epilogue, use_descriptors=True)


def test_gemm_strided_x_view(device):
    # x is a column slice of a wider activation (row stride 72, base offset 2 elements): no copy,
    # base misaligned -> block pointers
    masters, (xw, w, b, r) = make_inputs((22,), 72, 40, "random", torch.bfloat16, device, "bias")
    x = xw[:, 2:66]
    w = w[2:66]
    assert x.stride(0) == 72 and not _backend.tma_ok(x)
    before = _backend.launch_counts["gemm.blockptr"]
    y = G.gemm(x, w, b, epilogue="bias")
    assert _backend.launch_counts["gemm.blockptr"] == before + 1
    x32, w32, b32, _ = masters
    check("gemm strided x", y, x, w, b, None, (x32[:, 2:66], w32[2:66], b32, None), "bias")


def test_gemm_swiglu_unaligned_intermediate(device):
    # I=20: the up half starts 40 bytes into each W row -> not a valid descriptor base -> block ptrs
    masters, (x, w, b, r) = make_inputs((5, 5), 48, 40, "coord", torch.bfloat16, device, "swiglu")
    before = _backend.launch_counts["gemm.blockptr"]
    y = G.gemm(x, w, b, epilogue="swiglu")
    assert _backend.launch_counts["gemm.blockptr"] == before + 1
    assert y.shape == (5, 5, 20)
    check("gemm swiglu I=20", y, x, w, b, r, masters, "swiglu")
    # and without bias
    y2 = G.gemm(x, w, epilogue="swiglu")
    check("gemm swiglu I=20 no bias", y2, x, w, None, None, (masters[0], masters[1], None, None), "swiglu")


def test_gemm_many_tiles_swizzle(device):
    # 5 x 7 output tiles with GROUP_SIZE_M=2 (interpreter config): the last group is partial; NaN
    # poisoning makes any tile the swizzle skips fail
    masters, (x, w, b, r) = make_inputs((70,), 96, 200, "coord", torch.bfloat16, device, "residual")
    y = G.gemm(x, w, b, r, "residual")
    check("gemm 70x96x200 residual", y, x, w, b, r, masters, "residual")


@pytest.mark.parametrize("m,with_bias", [(1, False), (5, True), (70, False), (70, True)])
def test_gemm_residual_scale(device, m, with_bias):
    """res_scale (Granite's residual_multiplier): residual + 0.22 * (x @ W (+ b)) in fp32, rounded
    once, on the decode GEMV (M <= 16) and the tiled kernel; the unscaled sum is another result."""
    masters, (x, w, b, r) = make_inputs((m,), 96, 72, "coord", torch.bfloat16, device, "residual")
    b = b if with_bias else None
    y = G.gemm(x, w, b, r, "residual", res_scale=0.22)
    want = G.gemm_ref(x.to(w.dtype), w, b, r, "residual", res_scale=0.22)
    scale = want.abs().max().item()
    metrics.assert_close(f"gemm m{m} residual x0.22", y, want.to(y.dtype), atol=1e-4 * scale + 1e-6, rtol=BF16_ULP)
    unscaled = G.gemm(x, w, b, r, "residual")
    assert (unscaled.float() - y.float()).abs().max() > 0.1 * scale
    with pytest.raises(ValueError, match="res_scale 0.5 scales the residual epilogue's branch; epilogue is 'none'"):
        G.gemm(x, w, epilogue="none", res_scale=0.5)


def test_gemm_medium_shape(device):
    masters, (x, w, b, r) = make_inputs((64,), 256, 384, "random", torch.bfloat16, device, "swiglu")
    y = G.gemm(x, w, b, epilogue="swiglu")
    check("gemm 64x256x(2x192) swiglu", y, x, w, b, None, masters, "swiglu")


def test_gemm_fp16_activation_and_vector_x(device):
    masters, (x, w, b, r) = make_inputs((9,), 32, 64, "coord", torch.float16, device, "hardswish")
    y = G.gemm(x, w, b, epilogue="hardswish")
    assert y.dtype == torch.float16
    check("gemm fp16 x, bf16 W, hardswish", y, x, w, b, None, masters, "hardswish")
    v = G.gemm(x[0], w)  # a single [K] vector -> [N]
    assert v.shape == (64,)
    metrics.assert_close("gemm vector x", v, oracle(x[0], w, None, None, "none"), atol=1e-3, rtol=2.0**-10)


def test_gemm_launch_cache(device):
    # the second call of a problem class skips the autotuner and must give the same result; a
    # different class (other N) goes through the autotuner again
    masters, (x, w, b, r) = make_inputs((19,), 48, 80, "coord", torch.bfloat16, device, "bias")
    y1 = G.gemm(x, w, b, epilogue="bias")
    hits = _backend.launch_counts["gemm.launch_cached"]
    y2 = G.gemm(x, w, b, epilogue="bias")
    assert _backend.launch_counts["gemm.launch_cached"] == hits + 1
    assert torch.equal(y1, y2)
    check("gemm cached launch", y2, x, w, b, r, masters, "bias")
    G.gemm(x, w[:, :72], b[:72], epilogue="bias")
    assert _backend.launch_counts["gemm.launch_cached"] == hits + 1


def test_gemm_empty_m(device):
    w = torch.randn(16, 32).bfloat16().to(device)
    y = G.gemm(torch.empty(0, 16, dtype=torch.bfloat16, device=device), w)
    assert y.shape == (0, 32)


def test_gemm_bad_inputs(device):
    x = torch.randn(4, 32).bfloat16().to(device)
    w = torch.randn(32, 48).bfloat16().to(device)
    b = torch.randn(48).bfloat16().to(device)
    cases = [
        (dict(x=x, w=w, epilogue="gelu"), "unknown epilogue"),
        (dict(x=x, w=w[:31]), "last dim must be K"),
        (dict(x=x, w=w.float()), "weight dtype"),
        (dict(x=x.to(torch.int32), w=w), "x dtype"),
        # neither K-major rows nor a transposed nn.Linear weight (weight.t() is accepted)
        (dict(x=x, w=torch.randn(32, 96).bfloat16().to(device)[:, ::2]), "weight strides"),
        (dict(x=x, w=w, bias=b), "use epilogue='bias'"),
        (dict(x=x, w=w, epilogue="bias"), "needs a bias"),
        (dict(x=x, w=w, bias=b[:47], epilogue="bias"), "bias shape"),
        (dict(x=x, w=w, epilogue="residual"), "residual shape"),
        (dict(x=x, w=w, residual=torch.zeros(4, 47, dtype=torch.bfloat16, device=device), epilogue="residual"), "residual shape"),
        (dict(x=x, w=w, residual=torch.zeros(4, 48, dtype=torch.bfloat16, device=device)), "use epilogue='residual'"),
        (dict(x=x, w=w[:, :47], epilogue="swiglu"), "even"),
        (dict(x=x, w=w.view(-1)), "2-D"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            G.gemm(**kw)


def test_config_builders_and_pruning(monkeypatch):
    monkeypatch.setattr(_backend, "is_interpret", lambda: True)
    # under the interpreter: exactly one small config, whatever the backend
    assert len(_backend.gemm_configs("cuda")) == 1 and len(_backend.gemm_configs("xpu")) == 1
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    xpu = _backend.gemm_configs("xpu")
    cuda = _backend.gemm_configs("cuda")
    assert all(c.kwargs.get("grf_mode") == "256" for c in xpu), "every XPU config uses large GRF mode"
    assert not any("grf_mode" in c.kwargs for c in cuda), "grf_mode is XPU-only"
    assert any(c.kwargs["BLOCK_M"] == 128 and c.kwargs["BLOCK_N"] in (128, 256) and c.num_stages >= 3 for c in cuda)
    for cfgs in (xpu, cuda):
        for c in cfgs:
            assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M"} <= set(c.kwargs)

    # XPU register-file pruning: 256x256 survives alone (288 KiB of 512), not with two accumulators
    big = [c for c in xpu if c.kwargs["BLOCK_M"] == 256 and c.kwargs["BLOCK_N"] == 256][0]
    kept1 = _backend.gemm_prune("xpu", 1)(xpu, {"M": 4096})
    kept2 = _backend.gemm_prune("xpu", 2)(xpu, {"M": 4096})
    assert big in kept1 and big not in kept2 and len(kept2) >= 1
    # M-aware: a decode step (M=1) drops 256-row tiles, keeps narrow ones
    kept_dec = _backend.gemm_prune("xpu", 1)(xpu, {"M": 1})
    assert all(c.kwargs["BLOCK_M"] <= 64 for c in kept_dec) and kept_dec
    # CUDA shared memory: 128x256x64 with 3 stages fits alone (144 KiB) but not for swiglu (240 KiB)
    c256 = [c for c in cuda if c.kwargs["BLOCK_N"] == 256][0]
    assert c256 in _backend.gemm_prune("cuda", 1)(cuda, {"M": 4096})
    assert c256 not in _backend.gemm_prune("cuda", 2)(cuda, {"M": 4096})
    # CUDA registers: a 128x128 tile at 4 warps holds 128 fp32 accumulators per thread (kept),
    # two of them for swiglu hold 256 (dropped: it would spill); at 8 warps both fit
    w4 = [c for c in cuda if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps) == (128, 128, 4)]
    w8 = [c for c in cuda if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps) == (128, 128, 64, 8)]
    assert w4 and w8
    assert all(c in _backend.gemm_prune("cuda", 1)(cuda, {"M": 4096}) for c in w4)
    assert not any(c in _backend.gemm_prune("cuda", 2)(cuda, {"M": 4096}) for c in w4)
    assert all(c in _backend.gemm_prune("cuda", 2)(cuda, {"M": 4096}) for c in w8)
    # N/K-aware: a small projection (LeViT-like N=K=128) keeps no tile wider or deeper than it
    small = _backend.gemm_prune("cuda", 1)(cuda, {"M": 2048, "N": 128, "K": 128})
    assert small and all(c.kwargs["BLOCK_N"] <= 256 and c.kwargs["BLOCK_K"] <= 128 for c in small)
    assert len(small) < len(_backend.gemm_prune("cuda", 1)(cuda, {"M": 2048, "N": 4096, "K": 4096}))
    # every config is deeper than K=16: the smallest-footprint one is kept, never none
    assert len(_backend.gemm_prune("cuda", 1)(cuda, {"M": 2048, "N": 16, "K": 16})) == 1
    # never empty
    huge = [triton.Config({"BLOCK_M": 512, "BLOCK_N": 512, "BLOCK_K": 128, "GROUP_SIZE_M": 8}, num_warps=4, num_stages=4),
            triton.Config({"BLOCK_M": 256, "BLOCK_N": 512, "BLOCK_K": 128, "GROUP_SIZE_M": 8}, num_warps=4, num_stages=4)]
    assert len(_backend.gemm_prune("cuda", 2)(huge, {"M": 4096})) == 1


def test_tma_ok_rules():
    t = torch.zeros(8, 64, dtype=torch.bfloat16)
    assert _backend.tma_ok(t)
    assert not _backend.tma_ok(t[:, 1:])          # base pointer off by 2 bytes
    assert not _backend.tma_ok(torch.zeros(8, 70, dtype=torch.bfloat16))  # 140-byte rows
    assert _backend.tma_ok(torch.zeros(8, 72, dtype=torch.bfloat16)[:, :70])  # 144-byte rows, aligned base
    assert not _backend.tma_ok(t.t())             # last stride not 1
    assert not _backend.tma_ok(torch.zeros(64, dtype=torch.bfloat16))  # 1-D


@pytest.mark.parametrize("epilogue", ["none", "bias", "swiglu"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_gemm_reads_a_transposed_weight_in_place(device, epilogue, out_dtype):
    """w = weight.t() of a row-major [N, K] nn.Linear weight: block pointers read it without a copy,
    with the same result as the packed K-major copy, and so do tensor descriptors over its [N, K]
    rows; out_dtype=float32 is the unrounded accumulator."""
    m_shape, k, n = (3, 7), 72, 40  # partial tiles in M, N and K
    n_w = 2 * n if epilogue == "swiglu" else n
    masters, (x, w, b, r) = make_inputs(m_shape, k, n_w, "random", torch.bfloat16, device, epilogue)
    wt = w.t().contiguous().t()  # same values, [N, K] storage seen as [K, N]
    assert wt.stride() == (1, k)
    before = _backend.launch_counts["gemm.blockptr"]
    y = G.gemm(x, wt, b, None, epilogue, out_dtype=out_dtype)
    assert _backend.launch_counts["gemm.blockptr"] == before + 1
    assert y.dtype == out_dtype and y.shape == tuple(m_shape) + (n,)
    ref = G.gemm_ref(x.to(w.dtype), w, b, None, epilogue)
    if out_dtype == torch.float32:
        # no output rounding: fp32 summation order is the only difference
        metrics.assert_close("gemm weight.t() fp32 out", y, ref, atol=1e-4 * ref.abs().max().item() + 1e-6, rtol=1e-5)
    else:
        check(f"gemm {epilogue} weight.t()", y, x, wt, b, None, masters, epilogue)
    # tensor descriptors read it as the [N, K] tensor it is, each tile transposed
    if _backend.has_descriptors():
        before = _backend.launch_counts["gemm.desc"]
        yd = G.gemm(x, wt, b, None, epilogue, use_descriptors=True, out_dtype=out_dtype)
        assert _backend.launch_counts["gemm.desc"] == before + 1
        if out_dtype == torch.float32:
            metrics.assert_close("gemm weight.t() desc", yd, ref, atol=1e-4 * ref.abs().max().item() + 1e-6, rtol=1e-5)
        else:
            check(f"gemm {epilogue} weight.t() desc", yd, x, wt, b, None, masters, epilogue)
    with pytest.raises(ValueError, match="out_dtype"):
        G.gemm(x, w, b, None, epilogue, out_dtype=torch.int32)
