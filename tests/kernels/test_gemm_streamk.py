"""Stream-K GEMM (gemm.py's _gemm_streamk_kernel, config STREAM_K): the work-unit schedule, every
epilogue on both memory paths and an N-major weight, programs more and fewer than the tiles, K
not a multiple of BLOCK_K and segments that do not divide a tile's K steps, against an fp64
reference and the tiled kernel; bit-identical repeats, semaphores back at zero, the config's
checks."""

import importlib

import pytest
import torch
import triton

import metrics
from xpuinject_kernels import _backend, _ops

G = importlib.import_module("xpuinject_kernels.gemm")

BF16_ULP = 2.0**-7
GATED = ("swiglu", "geglu", "geglu_erf")
# small tiles: a few programs' worth of work units at interpreter-sized shapes
TILES = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_SIZE_M=2, num_warps=4, num_stages=1)


def ref64(x, w, b, r, epilogue, res_scale=1.0):
    """fp64 of the kernel's operands: the activation rounded to W's dtype, epilogue in fp64."""
    y = x.to(w.dtype).double() @ w.double()
    if b is not None:
        y = y + b.double()
    if epilogue in GATED:
        i = w.shape[1] // 2
        g, u = y[:, :i], y[:, i:]
        act = {"swiglu": torch.nn.functional.silu, "geglu_erf": torch.nn.functional.gelu,
               "geglu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[epilogue]
        return act(g) * u
    if epilogue == "hardswish":
        return torch.nn.functional.hardswish(y)
    if epilogue == "residual":
        return y * res_scale + r.double()
    return y


def operands(m, k, n, epilogue, device, seed=0, nmajor=False):
    """x [m, k], w [k, n_w] (gated: 2n gate | up columns), bias (every epilogue but none), residual;
    nmajor: w is weight.t() of an [n_w, k] nn.Linear weight."""
    g = torch.Generator().manual_seed(seed)
    n_w = 2 * n if epilogue in GATED else n
    x = torch.randn(m, k, generator=g).to(torch.bfloat16).to(device)
    if nmajor:
        w = (torch.randn(n_w, k, generator=g) * k ** -0.5).to(torch.bfloat16).to(device).t()
    else:
        w = (torch.randn(k, n_w, generator=g) * k ** -0.5).to(torch.bfloat16).to(device)
    b = (torch.randn(n_w, generator=g) * 0.3).to(torch.bfloat16).to(device) if epilogue != "none" else None
    r = torch.randn(m, n, generator=g).to(torch.bfloat16).to(device) if epilogue == "residual" else None
    return x, w, b, r


def schedule(m, k, n, programs):
    """(tiles, k_tiles, tiles run whole, per, grid, max segments) of a stream-K launch at TILES."""
    tiles = -(-m // TILES["BLOCK_M"]) * -(-n // TILES["BLOCK_N"])
    k_tiles = -(-k // TILES["BLOCK_K"])
    return (tiles, k_tiles) + G._streamk_split(tiles, k_tiles, programs)


def sems_zero(device, tiles):
    return int(_backend.semaphores(torch.device(device), tiles)[:tiles].abs().sum()) == 0


def brute_split(tiles, k_tiles, programs):
    """The schedule by enumeration: whole waves but the last run whole (all of them when they fill
    their waves), then program p owns units [p * per, (p + 1) * per) of the rest."""
    dp = tiles if tiles % programs == 0 else max(0, tiles // programs - 1) * programs
    total = (tiles - dp) * k_tiles
    if total == 0:
        return dp, 0, programs, 1
    per = -(-total // programs)
    owners = [u // per for u in range(total)]
    segs = max(len(set(owners[t * k_tiles:(t + 1) * k_tiles])) for t in range(tiles - dp))
    return dp, per, programs if dp else max(owners) + 1, segs


def test_schedule_matches_enumeration():
    """_streamk_split's closed form (the most segments a tile is cut into, from the residues of
    tile * k_tiles) agrees with walking every unit, where per divides k_tiles and where it does not,
    with and without whole waves run whole."""
    seen, dps = set(), set()
    for tiles in (1, 2, 3, 7, 9, 16, 40, 300):
        for k_tiles in (1, 2, 5, 8, 13, 64):
            for programs in (1, 2, 3, 8, 13, 24, 132, 500):
                got = G._streamk_split(tiles, k_tiles, programs)
                assert got == brute_split(tiles, k_tiles, programs), (tiles, k_tiles, programs)
                seen.add(got[3])
                dps.add(got[0] > 0 and got[0] < tiles)
    assert {1, 2, 3} <= seen and max(seen) >= 8  # whole tiles, and tiles cut in many segments
    assert dps == {True, False}
    # H100 at M=512 K=4096 N=4608 (128x256 tiles, BLOCK_K 64): 72 tiles, 64 K steps, 132 SMs
    assert G._streamk_split(72, 64, 132) == (0, 35, 132, 3)
    # 300 tiles on 132: the first wave whole, the second and the 36 left split (168 tiles)
    assert G._streamk_split(300, 64, 132)[:2] == (132, 82)
    assert G._streamk_split(264, 64, 132) == (264, 0, 132, 1)  # two full waves: all whole


# (M, K, N, programs): the schedules the correctness tests run, each checked by its own assertions
MANY_SEGMENTS = (20, 152, 24, 15)   # 4 tiles, 10 K steps (K % 16 = 8), per 3: 4 segments a tile
FEWER_PROGRAMS = (37, 72, 40, 4)    # 9 tiles, 5 K steps: a wave whole, then per 7: parts in each program
SMALL_M = (5, 160, 20, 40)          # one row tile, M below the GEMV bound, per 1: one K step a program


def test_schedules_exercise_the_cases():
    tiles, k_tiles, dp, per, grid, segs = schedule(*MANY_SEGMENTS)
    assert dp == 0 and grid > tiles and k_tiles % per != 0 and segs >= 4 and MANY_SEGMENTS[1] % TILES["BLOCK_K"] != 0
    tiles, k_tiles, dp, per, grid, segs = schedule(*FEWER_PROGRAMS)
    assert dp == 4 and grid < tiles and per > k_tiles and per % k_tiles != 0 and segs == 2
    assert FEWER_PROGRAMS[0] % 16 and FEWER_PROGRAMS[2] % 16  # partial tiles in M and N
    tiles, k_tiles, dp, per, grid, segs = schedule(*SMALL_M)
    assert dp == 0 and per == 1 and segs == k_tiles and SMALL_M[0] <= 16


def run_both(x, w, b, r, epilogue, programs, res_scale=1.0, **kw):
    """(stream-K output, tiled output) at TILES; asserts the stream-K kernel ran."""
    before = _backend.launch_counts["gemm.streamk"]
    y = G.gemm(x, w, b, r, epilogue, config=dict(TILES, STREAM_K=programs), res_scale=res_scale, **kw)
    assert _backend.launch_counts["gemm.streamk"] == before + 1
    y_tiled = G.gemm(x, w, b, r, epilogue, config=TILES, res_scale=res_scale, **kw)
    assert _backend.launch_counts["gemm.streamk"] == before + 1
    return y, y_tiled


def check(name, y, y_tiled, want):
    scale = want.abs().max().item()
    # one output rounding against the exact result (ties may flip with the fp32 summation order)
    metrics.assert_close(name + " vs fp64", y, want, atol=1e-4 * scale + 1e-6, rtol=BF16_ULP)
    # the tiled kernel sums the K steps in another order: at most a rounding apart
    metrics.assert_close(name + " vs tiled", y, y_tiled, atol=1e-4 * scale + 1e-6, rtol=2 * BF16_ULP)


@pytest.mark.parametrize("path", ["desc", "blockptr"])
@pytest.mark.parametrize("shape", [MANY_SEGMENTS, FEWER_PROGRAMS], ids=["many-segments", "fewer-programs"])
@pytest.mark.parametrize("epilogue", ["none", "bias", "swiglu", "geglu", "hardswish", "residual"])
def test_streamk_epilogues(device, epilogue, shape, path):
    m, k, n, programs = shape
    x, w, b, r = operands(m, k, n, epilogue, device)
    res_scale = 0.37 if epilogue == "residual" else 1.0
    before = _backend.launch_counts["gemm." + path]
    y, y_tiled = run_both(x, w, b, r, epilogue, programs, res_scale, use_descriptors=path == "desc")
    assert _backend.launch_counts["gemm." + path] == before + 2
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    check(f"stream-K {epilogue} {path} {m}x{k}x{n} P={programs}", y, y_tiled, ref64(x, w, b, r, epilogue, res_scale))
    assert sems_zero(device, schedule(*shape)[0])


@pytest.mark.parametrize("path", ["desc", "blockptr"])
@pytest.mark.parametrize("epilogue", ["none", "swiglu", "geglu_erf"])
def test_streamk_nmajor_weight(device, epilogue, path):
    """w = weight.t() of an [N, K] nn.Linear weight, read in place by both memory paths; fp32 out
    keeps the accumulators unrounded, so stream-K's split sums meet the tiled kernel's at fp32
    summation-order noise."""
    m, k, n, programs = MANY_SEGMENTS
    x, w, b, r = operands(m, k, n, epilogue, device, seed=1, nmajor=True)
    assert w.stride(0) == 1
    y, y_tiled = run_both(x, w, b, r, epilogue, programs, use_descriptors=path == "desc", out_dtype=torch.float32)
    want = ref64(x, w, b, r, epilogue)
    scale = want.abs().max().item()
    metrics.assert_close(f"stream-K {epilogue} weight.t() {path} vs fp64", y, want, atol=1e-5 * scale, rtol=1e-5)
    metrics.assert_close(f"stream-K {epilogue} weight.t() {path} vs tiled", y, y_tiled, atol=1e-5 * scale, rtol=1e-5)


@pytest.mark.parametrize("programs", [1, 3], ids=["one-program", "whole-tiles"])
def test_streamk_whole_tiles_only(device, programs):
    """Tiles that fill their waves (9 tiles on 1 or 3 programs) all run whole, each program a
    tile at a time through the data-parallel loop: no partial, no semaphore."""
    m, k, n = 37, 72, 40  # 9 tiles of 5 K steps
    tiles, k_tiles, dp, per, grid, segs = schedule(m, k, n, programs)
    assert segs == 1 and grid == programs and (dp == tiles or per % k_tiles == 0)
    x, w, b, r = operands(m, k, n, "bias", device, seed=2)
    y, y_tiled = run_both(x, w, b, r, "bias", programs)
    check(f"stream-K whole tiles P={programs}", y, y_tiled, ref64(x, w, b, r, "bias"))


def test_streamk_small_m(device):
    """M below the GEMV bound with a config takes the stream-K kernel, one K step a program."""
    m, k, n, programs = SMALL_M
    x, w, b, r = operands(m, k, n, "residual", device, seed=3)
    y, y_tiled = run_both(x, w, b, r, "residual", programs)
    check("stream-K M=5 residual", y, y_tiled, ref64(x, w, b, r, "residual"))


def test_streamk_deterministic_and_semaphores_reset(device):
    """Two calls give the same bits; the semaphores are back at zero after each, so a call right
    after, on other operands, is right too; a count left behind breaks a tile (the check sees it)."""
    m, k, n, programs = MANY_SEGMENTS
    tiles = schedule(*MANY_SEGMENTS)[0]
    cfg = dict(TILES, STREAM_K=programs)
    x, w, b, r = operands(m, k, n, "swiglu", device, seed=4)
    y1 = G.gemm(x, w, b, epilogue="swiglu", config=cfg)
    assert sems_zero(device, tiles)
    y2 = G.gemm(x, w, b, epilogue="swiglu", config=cfg)
    assert torch.equal(y1, y2)
    want = ref64(x, w, b, None, "swiglu")
    metrics.assert_close("stream-K repeat", y2, want, atol=1e-4 * want.abs().max().item() + 1e-6, rtol=BF16_ULP)
    x2, w2, b2, _ = operands(m, k, n, "swiglu", device, seed=5)
    y3 = G.gemm(x2, w2, b2, epilogue="swiglu", config=cfg)
    want3 = ref64(x2, w2, b2, None, "swiglu")
    metrics.assert_close("stream-K next operands", y3, want3, atol=1e-4 * want3.abs().max().item() + 1e-6,
                         rtol=BF16_ULP)
    assert sems_zero(device, tiles)
    # a tile whose count does not start at zero finishes before all its segments are in
    sem = _backend.semaphores(torch.device(device), tiles)
    sem[0] = 1
    try:
        bad = G.gemm(x2, w2, b2, epilogue="swiglu", config=cfg)
    finally:
        sem.zero_()
    with pytest.raises(AssertionError):
        metrics.assert_close("stream-K stale semaphore", bad, want3, atol=1e-4 * want3.abs().max().item() + 1e-6,
                             rtol=BF16_ULP)


def test_streamk_config_and_op(device, monkeypatch):
    """STREAM_K is optional: the six keys stay required, 0 is the tiled kernel, a negative or bool
    value is refused; the op takes the seven values; too many tiles for the semaphores is refused."""
    m, k, n, programs = FEWER_PROGRAMS
    x, w, b, r = operands(m, k, n, "none", device, seed=6)
    with pytest.raises(ValueError, match="config lacks GROUP_SIZE_M, num_warps, num_stages"):
        G.gemm(x, w, config={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "STREAM_K": 8})
    for bad in (-1, True, 2.0):
        with pytest.raises(ValueError, match="STREAM_K"):
            G.gemm(x, w, config=dict(TILES, STREAM_K=bad))
    with pytest.raises(ValueError, match="unknown config key"):
        G.gemm(x, w, config=dict(TILES, STREAMK=8))
    before = _backend.launch_counts["gemm.streamk"]
    y0 = G.gemm(x, w, config=dict(TILES, STREAM_K=0))
    assert _backend.launch_counts["gemm.streamk"] == before
    assert torch.equal(y0, G.gemm(x, w, config=TILES))
    assert G._fixed_config(dict(TILES, STREAM_K=0)) == (16, 16, 16, 2, 4, 1)
    assert G._fixed_config(dict(TILES, STREAM_K=programs)) == (16, 16, 16, 2, 4, 1, programs)
    y = _ops.op("gemm")(x, w, None, None, "none", None, None, [16, 16, 16, 2, 4, 1, programs], 1.0)
    assert _backend.launch_counts["gemm.streamk"] == before + 1
    assert torch.equal(y, G.gemm(x, w, config=dict(TILES, STREAM_K=programs)))
    want = ref64(x, w, None, None, "none")
    metrics.assert_close("stream-K through the op", y, want, atol=1e-4 * want.abs().max().item() + 1e-6, rtol=BF16_ULP)
    tiles, _, dp = schedule(m, k, n, programs)[:3]
    monkeypatch.setattr(_backend, "SEMAPHORES", tiles - dp - 1)
    with pytest.raises(ValueError, match=f"stream-K over {tiles - dp} split tiles needs a semaphore a tile"):
        G.gemm(x, w, config=dict(TILES, STREAM_K=programs))


def test_streamk_programs(device):
    p = G.streamk_programs(device)
    assert isinstance(p, int) and p >= 1
    if device == "cpu":
        assert p == 8
    elif device == "cuda":
        assert p == torch.cuda.get_device_properties(torch.device(device)).multi_processor_count


def test_auto_streamk_choice(monkeypatch):
    """The automatic choice: only when switched on, on CUDA, above decode sizes, and where the
    tiled grid's waves are less than STREAMK_MAX_FILL full."""
    assert G.wave_fill(72, 132) == pytest.approx(72 / 132)
    assert G.wave_fill(192, 132) == pytest.approx(192 / 264)
    assert G.wave_fill(264, 132) == 1.0
    cfg = triton.Config(dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_SIZE_M=8), num_warps=8, num_stages=3)
    cuda = torch.device("cuda")
    monkeypatch.setattr(_backend, "_CU_CACHE", {("cuda", None): 132})
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    monkeypatch.setattr(G, "STREAMK_AUTO", None)
    assert G._auto_streamk("cuda", cuda, 512, 4608, cfg) == 0  # off unless asked
    monkeypatch.setattr(G, "STREAMK_AUTO", True)
    assert G._auto_streamk("cuda", cuda, 512, 4608, cfg) == 132  # 72 tiles: 0.55 of a wave
    assert G._auto_streamk("cuda", cuda, 2048, 4096, cfg) == 0  # 256 tiles: 0.97 of two waves
    assert G._auto_streamk("cuda", cuda, 32, 4608, cfg) == 0  # decode sizes keep their path
    assert G._auto_streamk("xpu", torch.device("xpu"), 512, 4608, cfg) == 0
