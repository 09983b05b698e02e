"""Decode-sized GEMM (gemv.py): split-K reduced in the kernel by the last program to arrive, every
epilogue, odd shapes (K not a multiple of a split, N not a multiple of a tile, M up to 16), against
an fp64 reference; gemm() routes M <= 16 on a packed weight to it; its semaphores end at zero."""

import importlib

import pytest
import torch
import triton

import metrics
from xpuinject_kernels import _backend, gemv

G = importlib.import_module("xpuinject_kernels.gemm")


def ref64(x, w, b, r, epilogue):
    """fp64 of the bf16 operands (the kernel's inputs), epilogue in fp64."""
    y = x.double() @ w.double()
    if b is not None:
        y = y + b.double()
    if epilogue in ("swiglu", "geglu", "geglu_erf"):
        i = w.shape[1] // 2
        g, u = y[:, :i], y[:, i:]
        act = {"swiglu": torch.nn.functional.silu, "geglu_erf": torch.nn.functional.gelu,
               "geglu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[epilogue]
        return act(g) * u
    if epilogue == "hardswish":
        return torch.nn.functional.hardswish(y)
    if epilogue == "residual":
        return y + r.double()
    return y


def operands(m, k, n_w, epilogue, dtype, device, seed=0, nmajor=False):
    """x, w, bias, residual, n; nmajor: w is the [K, N] view of an N-major [N, K] weight (the same
    values)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype).to(device)
    w = (torch.randn(k, n_w, generator=g) * k ** -0.5).to(torch.bfloat16).to(device)
    if nmajor:
        w = w.t().contiguous().t()
    b = (torch.randn(n_w, generator=g) * 0.3).to(torch.bfloat16).to(device) if epilogue == "bias" else None
    n = n_w // 2 if epilogue in ("swiglu", "geglu", "geglu_erf") else n_w
    r = torch.randn(m, n, generator=g).to(dtype).to(device) if epilogue == "residual" else None
    return x, w, b, r, n


def cfg(block_n, block_k, split, **flags):
    return triton.Config({"BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split, **flags}, num_warps=4,
                         num_stages=2)


def run(x, w, b, r, n, epilogue, config=None):
    out = _backend.empty((x.shape[0], n), x.dtype, x.device)
    return gemv.gemv(x, w, b, r, out, epilogue, config)


@pytest.mark.parametrize("layout", ["kmajor", "kmajor-ew", "nmajor"])
@pytest.mark.parametrize("epilogue", ["none", "bias", "residual", "swiglu", "geglu", "geglu_erf", "hardswish"])
@pytest.mark.parametrize("m,k,n_w,split", [(1, 200, 72, 3), (3, 130, 40, 4), (8, 96, 100, 1), (16, 72, 34, 2),
                                           (2, 400, 40, 6), (1, 72, 34, 1)])
def test_gemv_matches_fp64(device, epilogue, m, k, n_w, split, layout):
    # K = 200 over 3 splits of 32-row steps: the last split is short; N = 72 / 100 / 34: partial tiles.
    # An N-major weight (nn.Linear's layout, seen as [K, N]) reads [BLOCK_N, BLOCK_K] tiles of K runs;
    # a gated one finds its up rows UP_OFF rows on. kmajor-ew: the config's EW switch, which one
    # row takes (the CUDA cores' multiply-add) and more rows ignore.
    if epilogue in ("swiglu", "geglu", "geglu_erf") and n_w % 2:
        n_w += 1
    nmajor = layout == "nmajor"
    x, w, b, r, n = operands(m, k, n_w, epilogue, torch.bfloat16, device, nmajor=nmajor)
    assert (w.stride(0) == 1) is nmajor
    ew = _backend.launch_counts["gemv.ew"]
    y = run(x, w, b, r, n, epilogue, cfg(32, 32, split, **({"EW": 1} if layout == "kmajor-ew" else {})))
    assert _backend.launch_counts["gemv.ew"] == ew + (m == 1 and layout != "kmajor")
    ref = ref64(x, w, b, r, epilogue)
    scale = ref.abs().max().item()
    # one bf16 rounding of the output, plus fp32 accumulation noise
    metrics.assert_close(f"gemv {epilogue} m{m} k{k} n{n_w} split{split}", y, ref.to(y.dtype),
                         atol=1e-3 * scale + 1e-6, rtol=2.0**-7)
    assert int(_backend.semaphores(x.device, 1).abs().sum()) == 0, "every counter back at zero"
    if nmajor:  # the same partials in the same order as the K-major weight's
        y_k = run(x, w.contiguous(), b, r, n, epilogue, cfg(32, 32, split))
        metrics.assert_close(f"gemv {epilogue} nmajor vs kmajor", y, y_k, atol=1e-2 * scale + 1e-6, rtol=2.0**-7)


@pytest.mark.parametrize("layout", ["kmajor", "kmajor-ew", "nmajor"])
def test_gemv_residual_scale(device, layout):
    """The residual epilogue's res_scale on every path (split, EW, N-major): residual +
    0.22 * x @ W against fp64, one rounding."""
    x, w, b, r, n = operands(1, 200, 72, "residual", torch.bfloat16, device, seed=7, nmajor=layout == "nmajor")
    out = _backend.empty((1, n), x.dtype, x.device)
    y = gemv.gemv(x, w, b, r, out, "residual", cfg(32, 32, 3, **({"EW": 1} if layout == "kmajor-ew" else {})),
                  res_scale=0.22)
    ref = (x.double() @ w.double()) * 0.22 + r.double()
    metrics.assert_close(f"gemv residual x0.22 {layout}", y, ref.to(y.dtype), atol=1e-3 * ref.abs().max().item(),
                         rtol=2.0**-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemv_same_result_for_every_arrival_order(device, dtype):
    # partials are summed in split order by whichever program arrives last: two launches agree bit
    # for bit, and a different split count only moves fp32 rounding
    x, w, b, r, n = operands(5, 256, 96, "residual", dtype, device, seed=3)
    y1 = run(x, w, b, r, n, "residual", cfg(32, 32, 4))
    y2 = run(x, w, b, r, n, "residual", cfg(32, 32, 4))
    assert torch.equal(y1, y2)
    y3 = run(x, w, b, r, n, "residual", cfg(32, 32, 1))
    metrics.assert_close("gemv split 4 vs 1", y1, y3, atol=1e-2, rtol=2.0**-7)


def test_gemm_routes_decode_rows_to_gemv(device):
    x, w, b, r, n = operands(4, 96, 64, "bias", torch.bfloat16, device, seed=5)
    before = _backend.launch_counts["gemv"]
    tiled = _backend.launch_counts["gemm.blockptr"] + _backend.launch_counts["gemm.desc"]
    y = G.gemm(x, w, b, epilogue="bias")
    assert _backend.launch_counts["gemv"] == before + 1
    assert _backend.launch_counts["gemm.blockptr"] + _backend.launch_counts["gemm.desc"] == tiled
    metrics.assert_close("gemm -> gemv", y, ref64(x, w, b, None, "bias").to(y.dtype), atol=2e-2, rtol=2.0**-7)
    # 17 rows, or a weight.t() view wider than NMAJOR_MAX_N (a tied lm_head's): the tiled kernel
    x17 = torch.randn(17, 96).bfloat16().to(device)
    G.gemm(x17, w, b, epilogue="bias")
    nmajor = w.t().contiguous().t()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gemv, "NMAJOR_MAX_N", 63)
        G.gemm(x, nmajor, b, epilogue="bias")
    assert _backend.launch_counts["gemv"] == before + 1
    # an N-major weight up to NMAJOR_MAX_N outputs: the GEMV, the same numbers
    y_n = G.gemm(x, nmajor, b, epilogue="bias")
    assert _backend.launch_counts["gemv"] == before + 2
    metrics.assert_close("gemm -> gemv nmajor", y_n, y, atol=2e-2, rtol=2.0**-7)


def test_gemv_heuristic_splits_to_fill_the_device():
    # 64 tiles of 64 columns on 132 SMs: split K until 1.5 tiles per SM, each split >= 2 BLOCK_K steps
    c = gemv.heuristic_config("cuda", 1, 4096, 4096, 1, 132)
    assert c.kwargs == {"BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 4}
    # a gated weight streams two tiles per program; a wide N fills the device alone
    assert gemv.heuristic_config("cuda", 1, 14336, 4096, 2, 132).kwargs["SPLIT_K"] == 1
    assert gemv.heuristic_config("cuda", 1, 128256, 2048, 1, 132).kwargs["SPLIT_K"] == 1
    # a shallow K caps the split
    assert gemv.heuristic_config("cuda", 1, 256, 512, 1, 132).kwargs["SPLIT_K"] == 2
    # N-major, one row: 16 rows by 256-deep K runs (8 by 512 from K = 4096), split only where the
    # tiles leave SMs idle
    c = gemv.heuristic_config("cuda", 1, 5120, 2048, 1, 132, kmajor=False)
    assert c.kwargs == {"BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 1}
    c = gemv.heuristic_config("cuda", 1, 2048, 4096, 1, 132, kmajor=False)
    assert c.kwargs == {"BLOCK_N": 8, "BLOCK_K": 512, "SPLIT_K": 1}
    assert gemv.heuristic_config("cuda", 1, 512, 2048, 1, 132, kmajor=False).kwargs["SPLIT_K"] == 4
    # a head-wide tile (the dot's rope epilogue, 128 rows) steps K by 64
    assert gemv.heuristic_config("cuda", 1, 5120, 2048, 1, 132, 128, kmajor=False).kwargs["BLOCK_K"] == 64
    # more rows (the 16-row dot): 32 by 128
    assert gemv.heuristic_config("cuda", 8, 2048, 4096, 1, 132, kmajor=False).kwargs == {"BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 4}
    # a head-wide tile (the rope epilogue's 128 rows) steps K by 64
    assert gemv.heuristic_config("cuda", 1, 5120, 2048, 1, 132, 128, kmajor=False).kwargs["BLOCK_K"] == 64


def test_gemv_refuses_a_weight_with_no_unit_stride(device):
    x, w, b, r, n = operands(1, 64, 32, "none", torch.bfloat16, device)
    wide = torch.zeros(64, 64, dtype=w.dtype, device=device)[:, ::2]
    with pytest.raises(ValueError, match=r"weight strides \(64, 2\)"):
        run(x, wide, None, None, 32, "none")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, split", [(1, 1), (5, 3), (16, 2)])
def test_add_rms_norm_gemm_matches_the_two_kernels(device, dtype, m, split):
    """The add + RMSNorm in the GEMV's prologue gives add_rms_norm's new residual exactly and the
    normed input the separate kernels give (one fp32 sum-of-squares order apart), for swiglu
    with a bias; more than 16 rows run the two kernels."""
    from xpuinject_kernels.rmsnorm import add_rms_norm

    g = torch.Generator().manual_seed(7)
    k, n_w = 200, 96
    x = torch.randn(m, k, generator=g).to(dtype).to(device)
    res = torch.randn(m, k, generator=g).to(dtype).to(device)
    nw = (torch.rand(k, generator=g) + 0.5).to(dtype).to(device)
    w = (torch.randn(k, n_w, generator=g) * k ** -0.5).to(torch.bfloat16).to(device)
    b = (torch.randn(n_w, generator=g) * 0.1).to(torch.bfloat16).to(device)
    ref_res, normed = add_rms_norm(x, res, nw, 1e-5)
    ref = G.gemm(normed, w, bias=b, epilogue="swiglu", use_descriptors=False)
    before = _backend.launch_counts["add_rms_norm_gemm"]
    new_res, out = G.add_rms_norm_gemm(x, res, nw, 1e-5, w, b, "swiglu")
    assert _backend.launch_counts["add_rms_norm_gemm"] == before + 1
    assert torch.equal(new_res, ref_res)
    metrics.assert_close(f"add_rms_norm_gemm m{m}", out, ref, atol=2e-2, rtol=2.0**-6)
    # a forced K split: every split's first-tile program writes its slice of the new residual
    s_out = torch.full_like(x, float("nan"))
    o = torch.empty(m, n_w // 2, dtype=dtype, device=device)
    gemv.gemv(x, w, b, None, o, "swiglu", cfg(32, 32, split), norm=(res, nw, 1e-5, s_out))
    assert torch.equal(s_out, ref_res)
    metrics.assert_close(f"add_rms_norm_gemm m{m} split{split}", o, ref, atol=2e-2, rtol=2.0**-6)
    # 17 rows: the two kernels, the same numbers
    x17, r17 = torch.randn(17, k).to(dtype).to(device), torch.randn(17, k).to(dtype).to(device)
    new17, out17 = G.add_rms_norm_gemm(x17, r17, nw, 1e-5, w, b, "swiglu")
    want_res, want_normed = add_rms_norm(x17, r17, nw, 1e-5)
    assert _backend.launch_counts["add_rms_norm_gemm"] == before + 1
    assert torch.equal(new17, want_res) and torch.equal(out17, G.gemm(want_normed, w, bias=b, epilogue="swiglu"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, split, epilogue", [(1, 1, "none"), (3, 3, "bias"), (16, 2, "swiglu"), (2, 1, "swiglu")])
def test_rms_norm_gemm_matches_fp64(device, dtype, m, split, epilogue, monkeypatch):
    """The input RMSNorm inside the GEMV (rstd on the accumulator): against fp64 of
    rms_norm(x) @ w, at least as close as the two kernels (norm, then GEMM) come, with and without
    a K split; more than 16 rows run the two kernels, bit for bit."""
    from xpuinject_kernels.rmsnorm import rms_norm

    monkeypatch.setattr(G, "FUSE_INPUT_NORM", True)

    g = torch.Generator().manual_seed(11 + m)
    k, n_w = 200, 256
    x = (torch.randn(m, k, generator=g) * 3).to(dtype).to(device)
    nw = (torch.rand(k, generator=g) + 0.5).to(dtype).to(device)
    w = (torch.randn(k, n_w, generator=g) * k ** -0.5).to(torch.bfloat16).to(device)
    b = (torch.randn(n_w, generator=g) * 0.1).to(torch.bfloat16).to(device) if epilogue == "bias" else None
    xd = x.double()
    normed64 = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * nw.double()
    ref = ref64(normed64, w, b, None, epilogue)
    two = G.gemm(rms_norm(x, nw, 1e-5), w, bias=b, epilogue=epilogue, use_descriptors=False)
    before = _backend.launch_counts["rms_norm_gemm"]
    out = G.rms_norm_gemm(x, nw, 1e-5, w, b, epilogue)
    assert _backend.launch_counts["rms_norm_gemm"] == before + 1
    # mean error: the max of a few dozen outputs is mostly where the output's own rounding lands
    err_fused = (out.double() - ref).abs().mean().item()
    err_two = (two.double() - ref).abs().mean().item()
    assert err_fused <= err_two * 1.1, (err_fused, err_two)
    metrics.assert_close(f"rms_norm_gemm m{m}", out, ref.to(dtype), atol=2e-2, rtol=2.0**-6)
    # a forced K split: the splits' sums of squares meet in the last program to arrive
    n = n_w // 2 if epilogue == "swiglu" else n_w
    o = torch.empty(m, n, dtype=dtype, device=device)
    gemv.gemv(x, w, b, None, o, epilogue, cfg(32, 32, split), row_norm=(nw, 1e-5))
    metrics.assert_close(f"rms_norm_gemm m{m} split{split}", o, out, atol=1e-2, rtol=2.0**-7)
    assert int(_backend.semaphores(x.device, 1).abs().sum()) == 0
    # 17 rows: the two kernels, the same numbers
    x17 = torch.randn(17, k, generator=g).to(dtype).to(device)
    out17 = G.rms_norm_gemm(x17, nw, 1e-5, w, b, epilogue)
    assert _backend.launch_counts["rms_norm_gemm"] == before + 1
    assert torch.equal(out17, G.gemm(rms_norm(x17, nw, 1e-5), w, bias=b, epilogue=epilogue))


def test_rms_norm_gemm_runs_apart_where_launches_overlap(device, monkeypatch):
    """FUSE_INPUT_NORM unset: _backend.fuse_norm decides, fusing only on a GPU whose launches do not
    overlap (XPU, CUDA without programmatic dependent launch; not the CPU's interpreter); apart,
    rms_norm_gemm is rms_norm then the GEMM, the same numbers as those two calls. "0" never
    fuses, "1" always."""
    from xpuinject_kernels.rmsnorm import rms_norm

    with monkeypatch.context() as mp:  # the policy alone: no kernel runs while pdl is patched
        for overlap in (True, False):
            mp.setattr(_backend, "pdl", lambda dev, on=overlap: on)
            assert _backend.fuse_norm(None, torch.device("cuda")) is (not overlap)
            assert _backend.fuse_norm(None, torch.device("xpu"))
            assert not _backend.fuse_norm(None, torch.device("cpu"))
            for dev in ("cpu", "cuda", "xpu"):
                assert _backend.fuse_norm(True, torch.device(dev)) and not _backend.fuse_norm(False, torch.device(dev))
    g = torch.Generator().manual_seed(13)
    x = torch.randn(1, 64, generator=g).bfloat16().to(device)
    nw = torch.rand(64, generator=g).bfloat16().to(device) + 0.5
    w = (torch.randn(64, 48, generator=g) * 0.1).bfloat16().to(device)
    seen = []
    for setting, fuse in ((None, False), (None, True), (False, False), (True, True)):
        monkeypatch.setattr(G, "FUSE_INPUT_NORM", setting)
        monkeypatch.setattr(_backend, "fuse_norm", lambda s, dev, f=fuse: seen.append(s) or (f if s is None else s))
        before = _backend.launch_counts["rms_norm_gemm"], _backend.launch_counts["rms_norm"]
        out = G.rms_norm_gemm(x, nw, 1e-6, w, None, "none")
        ran = _backend.launch_counts["rms_norm_gemm"] - before[0], _backend.launch_counts["rms_norm"] - before[1]
        assert ran == ((1, 0) if fuse else (0, 1)), (setting, ran)
        if not fuse:
            assert torch.equal(out, G.gemm(rms_norm(x, nw, 1e-6), w))
    assert seen == [None, None, False, True]


def test_rms_norm_gemm_traces_as_one_op(device):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 64, generator=g).bfloat16().to(device)
    nw = torch.rand(64, generator=g).bfloat16().to(device) + 0.5
    w = (torch.randn(64, 48, generator=g) * 0.1).bfloat16().to(device)
    want = G.rms_norm_gemm(x, nw, 1e-6, w, None, "none")
    fn = torch.compile(lambda *a: G.rms_norm_gemm(*a, None, "none"), backend="aot_eager", fullgraph=True)
    assert torch.equal(fn(x, nw, 1e-6, w), want)


def test_add_rms_norm_gemm_traces_as_one_op(device):
    """Under torch.compile the fused call is one custom op with a fake: the same two outputs."""
    g = torch.Generator().manual_seed(9)
    x, res = (torch.randn(2, 64, generator=g).bfloat16().to(device) for _ in range(2))
    nw = torch.rand(64, generator=g).bfloat16().to(device) + 0.5
    w = (torch.randn(64, 48, generator=g) * 0.1).bfloat16().to(device)
    want = G.add_rms_norm_gemm(x, res, nw, 1e-6, w, None, "none")
    fn = torch.compile(lambda *a: G.add_rms_norm_gemm(*a, None, "none"), backend="aot_eager", fullgraph=True)
    got = fn(x, res, nw, 1e-6, w)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
