"""RMSNorm / fused add+RMSNorm vs transformers' LlamaRMSNorm, the fp32 reference and a
bf16-mirroring oracle, on random and coordinate-dependent inputs with odd and misaligned shapes."""

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import metrics
from xpuinject_kernels import _backend, rmsnorm

EPS = 1e-5


def oracle(x, w, eps):
    """Mirror of the kernel's formats: fp32 math, round to x.dtype after normalizing, multiply by
    the weight in fp32 and round once to promote(w, x)."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return (w.float() * normed.float()).to(torch.promote_types(w.dtype, x.dtype))


def make_x(shape, kind, dtype, device):
    if kind == "coord":
        x = 3.0 * metrics.coord_tensor(shape) + 0.5
    else:
        x = torch.randn(shape) * 2.0
    return x.to(dtype).to(device)


def make_w(n, dtype, device):
    # coordinate-dependent weight around 1 (a weight of ones hides a column permutation)
    return (1.0 + 0.5 * torch.cos(0.3 * torch.arange(n, dtype=torch.float32))).to(dtype).to(device)


def stock(x, w, eps):
    m = LlamaRMSNorm(x.shape[-1], eps=eps).to(x.device)
    with torch.no_grad():
        m.weight = torch.nn.Parameter(w.clone())
        return m(x)


def ulp_tol(dtype):
    # one unit in the last place of the output dtype, relative (bf16: 2^-8, fp16: 2^-11)
    return {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 1e-5}[dtype]


@pytest.mark.parametrize("kind", ["coord", "random"])
@pytest.mark.parametrize(
    "dtype,wdtype,shape",
    [
        (torch.bfloat16, torch.bfloat16, (5, 70)),
        (torch.bfloat16, torch.bfloat16, (2, 3, 123)),
        (torch.float16, torch.float16, (7, 64)),
        (torch.bfloat16, torch.float32, (4, 96)),
        (torch.float32, torch.float32, (3, 50)),
        (torch.bfloat16, torch.bfloat16, (3, 1536)),
    ],
)
def test_rms_norm_matches_stock_and_refs(device, kind, dtype, wdtype, shape):
    x = make_x(shape, kind, dtype, device)
    w = make_w(shape[-1], wdtype, device)
    before = _backend.launch_counts["rms_norm"]
    y = rmsnorm.rms_norm(x, w, EPS)
    assert _backend.launch_counts["rms_norm"] == before + 1
    assert y.shape == x.shape and y.dtype == torch.promote_types(wdtype, dtype)
    name = f"rms_norm {kind} {dtype} w={wdtype} {shape}"
    # the coarser of the two roundings (normalized value in x.dtype, product in y.dtype) bounds
    # how far apart two correct implementations can land
    tol = max(ulp_tol(dtype), ulp_tol(y.dtype))
    # (b) format-mirroring oracle: tight — at most one rounding step apart (variance sum order)
    metrics.assert_close(name + " vs oracle", y, oracle(x, w, EPS), atol=1e-6, rtol=tol)
    # stock transformers module
    metrics.assert_close(name + " vs LlamaRMSNorm", y, stock(x, w, EPS), atol=1e-6, rtol=tol)
    # (a) fp32 reference: both roundings
    metrics.assert_close(name + " vs fp32 ref", y, rmsnorm.rms_norm_ref(x, w, EPS), atol=1e-5, rtol=2 * tol, min_cosine=0.9999)
    # with a 16-bit intermediate, nearly every element is bit-identical to stock (differences only
    # on rounding ties); an fp32 pipeline differs in the last bits (1/sqrt vs rsqrt, sum order)
    exact = (y == stock(x, w, EPS)).float().mean().item()
    print(f"[metrics] {name}: bit-identical to LlamaRMSNorm: {exact:.4f}")
    if dtype != torch.float32:
        assert exact >= 0.97, f"{name}: only {exact:.4f} of elements bit-identical to LlamaRMSNorm"


def test_rms_norm_misaligned_row_stride(device):
    # rows of 70 bf16 inside a 71-wide buffer: row stride 142 bytes, not 16-byte aligned
    buf = make_x((6, 71), "coord", torch.bfloat16, device)
    x = buf[:, :70]
    assert x.stride(0) == 71 and not x.is_contiguous()
    w = make_w(70, torch.bfloat16, device)
    y = rmsnorm.rms_norm(x, w, EPS)
    metrics.assert_close("rms_norm stride71", y, oracle(x, w, EPS), atol=1e-6, rtol=ulp_tol(torch.bfloat16))
    # an offset base (pointer not 16-byte aligned) and a 3-D view with padded rows
    buf3 = make_x((2, 3, 81), "random", torch.bfloat16, device)
    x3 = buf3[:, :, 1:80]
    y3 = rmsnorm.rms_norm(x3, make_w(79, torch.bfloat16, device), EPS)
    metrics.assert_close("rms_norm 3d offset", y3, oracle(x3, make_w(79, torch.bfloat16, device), EPS), atol=1e-6, rtol=ulp_tol(torch.bfloat16))
    # a transposed input (no [rows, N] view exists) is copied, still right
    xt = make_x((40, 3), "coord", torch.bfloat16, device).t()
    yt = rmsnorm.rms_norm(xt, make_w(40, torch.bfloat16, device), EPS)
    metrics.assert_close("rms_norm transposed", yt, oracle(xt, make_w(40, torch.bfloat16, device), EPS), atol=1e-6, rtol=ulp_tol(torch.bfloat16))


def test_rms_norm_two_pass_wide_row(device):
    n = rmsnorm.MAX_BLOCK + 37  # wider than one block: the chunked two-pass loop runs
    x = make_x((2, n), "coord", torch.bfloat16, device)
    w = make_w(n, torch.bfloat16, device)
    y = rmsnorm.rms_norm(x, w, EPS)
    metrics.assert_close("rms_norm two-pass", y, oracle(x, w, EPS), atol=1e-6, rtol=ulp_tol(torch.bfloat16))
    r = make_x((2, n), "random", torch.bfloat16, device)
    s, yn = rmsnorm.add_rms_norm(x, r, w, EPS)
    assert torch.equal(s, x + r)
    metrics.assert_close("add_rms_norm two-pass", yn, oracle(x + r, w, EPS), atol=1e-6, rtol=ulp_tol(torch.bfloat16))


@pytest.mark.parametrize("kind", ["coord", "random"])
@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (5, 70)), (torch.float16, (2, 4, 123)), (torch.bfloat16, (3, 256))])
def test_add_rms_norm(device, kind, dtype, shape):
    x = make_x(shape, kind, dtype, device)
    r = make_x(shape, "random" if kind == "coord" else "coord", dtype, device)
    w = make_w(shape[-1], dtype, device)
    before = _backend.launch_counts["add_rms_norm"]
    new_res, y = rmsnorm.add_rms_norm(x, r, w, EPS)
    assert _backend.launch_counts["add_rms_norm"] == before + 1
    # the residual is exactly what transformers computes: a bf16/fp16 add
    assert new_res.dtype == dtype and torch.equal(new_res, x + r)
    name = f"add_rms_norm {kind} {dtype} {shape}"
    metrics.assert_close(name + " vs oracle", y, oracle(x + r, w, EPS), atol=1e-6, rtol=ulp_tol(dtype))
    s_ref, y_ref = rmsnorm.add_rms_norm_ref(x, r, w, EPS)
    metrics.assert_close(name + " residual vs fp32", new_res, s_ref, atol=1e-6, rtol=ulp_tol(dtype))
    # vs fp32 end to end: the residual rounding propagates through the norm
    metrics.assert_close(name + " vs fp32 ref", y, y_ref, atol=1e-4, rtol=4 * ulp_tol(dtype), min_cosine=0.9999)


def test_add_rms_norm_strided_residual(device):
    xb = make_x((4, 72), "coord", torch.bfloat16, device)
    rb = make_x((4, 75), "random", torch.bfloat16, device)
    x, r = xb[:, 1:71], rb[:, 3:73]
    w = make_w(70, torch.bfloat16, device)
    s, y = rmsnorm.add_rms_norm(x, r, w, EPS)
    assert torch.equal(s, x + r)
    metrics.assert_close("add_rms_norm strided", y, oracle(x + r, w, EPS), atol=1e-6, rtol=ulp_tol(torch.bfloat16))


def test_rms_norm_empty_rows(device):
    x = torch.empty((0, 64), dtype=torch.bfloat16, device=device)
    y = rmsnorm.rms_norm(x, make_w(64, torch.bfloat16, device), EPS)
    assert y.shape == (0, 64)


def test_rms_norm_bad_inputs(device, monkeypatch):
    x = make_x((3, 64), "random", torch.bfloat16, device)
    w = make_w(64, torch.bfloat16, device)
    with pytest.raises(ValueError, match="weight shape"):
        rmsnorm.rms_norm(x, make_w(63, torch.bfloat16, device), EPS)
    with pytest.raises(ValueError, match="dtype"):
        rmsnorm.rms_norm(x.to(torch.int32), w, EPS)
    with pytest.raises(ValueError, match="eps"):
        rmsnorm.rms_norm(x, w, -1.0)
    with pytest.raises(ValueError, match="residual shape"):
        rmsnorm.add_rms_norm(x, x[:, :32], w, EPS)
    with pytest.raises(ValueError, match="residual dtype"):
        rmsnorm.add_rms_norm(x, x.half(), w, EPS)
    # CPU tensors without the interpreter: a clear error, not a crash inside triton
    monkeypatch.setattr(_backend, "is_interpret", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        rmsnorm.rms_norm(x.cpu(), w.cpu(), EPS)


def test_interpreter_rounds_bf16_to_nearest_even(device):
    """conftest patches the interpreter's fp32->bf16 cast to RTNE (GPU behaviour); check it holds,
    including the values just above a tie and a mantissa carry into the exponent."""
    import triton
    import triton.language as tl

    @triton.jit
    def _cast(x_ptr, o_ptr, N: tl.constexpr):
        c = tl.arange(0, N)
        tl.store(o_ptr + c, tl.load(x_ptr + c).to(tl.bfloat16))

    special = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, 2.0 - 2**-9, -1.2731, float("nan"), float("inf"), 3e38])
    x = torch.cat([special, torch.randn(64 - special.numel())]).to(device)
    o = torch.empty(64, dtype=torch.bfloat16, device=device)
    _cast[(1,)](x, o, N=64)
    ref = x.to(torch.bfloat16)
    assert torch.equal(o.isnan(), ref.isnan())
    assert torch.equal(o[~ref.isnan()], ref[~ref.isnan()])


def test_norm_kernels_keep_their_roundings_on_hopper():
    """The interpreter rounds where the source says; a GPU compiler may not: for Llama's order
    before an add (rms_norm_add) it narrowed the rounded bf16 product to a bf16 multiply and
    contracted it with the residual add into one FMA, one rounding where torch makes two. Every
    RMSNorm case compiled offline for sm_90 with its launch options (scripts/cuda_compile_check.py)
    has no half-precision FMA, and without those options the Llama-order case has one."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(root / "kernels" / "python"))
    check = [sys.executable, str(root / "scripts" / "cuda_compile_check.py"), "--only", "rmsnorm"]
    p = subprocess.run(check, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0 and "5 passed, 0 failed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    assert rmsnorm.LAUNCH_OPTIONS == {"enable_fp_fusion": False}
    # the same check with the options taken away: the contraction comes back and is caught
    unfused = ("import runpy, sys; from xpuinject_kernels import rmsnorm; rmsnorm.LAUNCH_OPTIONS = {}; "
               f"sys.argv = {check[1:]!r}; runpy.run_path(sys.argv[0], run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", unfused], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 1 and "4 passed, 1 failed" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAIL  rmsnorm-add llama" in p.stdout and "fma.rn.bf16x2" in p.stdout
