"""GEMM on pre-packed K-major weights with fused epilogues.

    out[M, N] = epilogue(x[M, K] @ W[K, N] (+ bias[N]))

W is the transposed nn.Linear weight, [K, N] with unit column stride (packed offline: bf16,
K-major so each program streams contiguous [BLOCK_K, BLOCK_N] tiles), or the nn.Linear weight
itself seen as `weight.t()` (unit row stride, N-major), read in place: the lm_head uses this on
the embedding table it is tied to, and a decode step's GEMVs read some packed weights fastest
that way (packing.NMAJOR_ROLES). x is bf16/fp16 (fp32 accepted), any leading dims
(flattened to M). Accumulation is fp32; the dot runs in W's dtype (an fp16/fp32 activation tile is
rounded to W's dtype if they differ); the output is x's dtype, or `out_dtype`, rounded once after
the epilogue.

Epilogues (constexpr EPILOGUE, bias independent of it via HAS_BIAS):
  "none"       out = x@W
  "bias"       out = x@W + b                     (bias required)
  "swiglu"     W = [gate | up] concatenated along N ([K, 2I], gate columns first),
               out[M, I] = silu(x@Wg (+bg)) * (x@Wu (+bu)); bias, if any, is [2I] (gate | up).
               Each program computes the matching gate and up tiles (columns n and I + n) and
               never writes the [M, 2I] intermediate.
  "geglu"      as swiglu with gelu's tanh approximation for silu (Gemma's gelu_pytorch_tanh):
               out = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u, in fp32.
  "geglu_erf"  as geglu with the exact gelu (transformers' "gelu", Gemma 1's hidden_act):
               out = 0.5 g (1 + erf(g / sqrt(2))) * u, in fp32.
  "hardswish"  out = hardswish(x@W (+b))  = y * clamp(y + 3, 0, 6) / 6
  "residual"   out = x@W (+b) + r[M, N]

Memory access: tensor descriptors (`tl.make_tensor_descriptor`; an N-major weight, only when
asked, described as its [N, K] rows, each tile transposed in registers) when every operand passes
`_backend.tma_ok` (16-byte aligned base and row strides), else block pointers with boundary
checks — a misaligned descriptor gave silently wrong results on the H200. One 1-D grid with
GROUP_SIZE_M swizzling (Triton's matrix-multiplication tutorial, "L2 cache optimizations":
https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html) so
consecutive programs reuse the same W column panel.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops, gpus
from .contract import GEMM_EPILOGUES

__all__ = ["gemm", "add_rms_norm_gemm", "rms_norm_gemm", "gemm_ref", "EPILOGUES"]

# The fused epilogues (contract.json, which the planner's registry reads too).
EPILOGUES = GEMM_EPILOGUES
# constexpr codes
_EPI_NONE, _EPI_SWIGLU, _EPI_HARDSWISH, _EPI_RESIDUAL, _EPI_GEGLU, _EPI_GEGLU_ERF = 0, 1, 2, 3, 4, 5
_EPI_CODE = {"none": _EPI_NONE, "bias": _EPI_NONE, "swiglu": _EPI_SWIGLU, "hardswish": _EPI_HARDSWISH,
             "residual": _EPI_RESIDUAL, "geglu": _EPI_GEGLU, "geglu_erf": _EPI_GEGLU_ERF}
# The gated epilogues: W is [gate | up], each program computes both tiles.
_GATED = ("swiglu", "geglu", "geglu_erf")

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_W_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def _swizzle(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """Map a 1-D program id to (pid_m, pid_n) walking GROUP_SIZE_M row-tiles per column panel."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_SIZE_M * num_pid_n
    group = pid // per_group
    first_m = group * GROUP_SIZE_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    return pid_m, pid_n


@triton.jit
def _epilogue(acc, acc_up, b_ptr, offs_n, N, UP_OFF, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr):
    """Bias and activation on fp32 tiles (residual is added by the caller, which owns the tile
    addressing)."""
    nmask = offs_n < N
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
        if EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5):
            acc_up = acc_up + tl.load(b_ptr + UP_OFF + offs_n, mask=nmask, other=0.0).to(tl.float32)[None, :]
    if EPILOGUE == 1:
        # silu(g) * u, sigmoid through exp: fp32, no intermediate rounding
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    elif EPILOGUE == 4:
        # gelu_pytorch_tanh(g) * u; tanh(y) = 1 - 2 / (1 + exp(2y)) (saturates to +-1 without NaN)
        y = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (2.0 - 2.0 / (1.0 + tl.exp(2.0 * y))) * acc_up
    elif EPILOGUE == 5:
        # exact gelu(g) * u
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476)) * acc_up
    elif EPILOGUE == 2:
        acc = acc * tl.minimum(tl.maximum(acc + 3.0, 0.0), 6.0) / 6.0
    return acc


@triton.jit
def _gemm_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, o_ptr,
    M, N, K, M_BUCKET,
    stride_xm, stride_wk, stride_wn, stride_rm, stride_om,
    UP_OFF, res_scale,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, USE_DESC: tl.constexpr, W_KMAJOR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
):
    # M_BUCKET (next power of 2 of M) is only an autotune key: one tuning per size class, not per M.
    pid = tl.program_id(0)
    pid_m, pid_n = _swizzle(pid, M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    wty = w_ptr.dtype.element_ty
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # used by the gated epilogues only (DCE'd otherwise)
    GATED: tl.constexpr = EPILOGUE == 1 or (EPILOGUE == 4 or EPILOGUE == 5)
    if USE_DESC:
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
        # an N-major W is described as the [N, K] tensor it is and its tiles transposed in registers
        if W_KMAJOR:
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[stride_wk, 1],
                                               block_shape=[BLOCK_K, BLOCK_N])
        else:
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1],
                                               block_shape=[BLOCK_N, BLOCK_K])
        if GATED:
            # the up half as its own [K, I] tensor: OOB columns of a gate tile read zeros, never up
            if W_KMAJOR:
                wu_desc = tl.make_tensor_descriptor(w_ptr + UP_OFF, shape=[K, N], strides=[stride_wk, 1],
                                                    block_shape=[BLOCK_K, BLOCK_N])
            else:
                wu_desc = tl.make_tensor_descriptor(w_ptr + UP_OFF * stride_wn, shape=[N, K], strides=[stride_wn, 1],
                                                    block_shape=[BLOCK_N, BLOCK_K])
        for kk in range(0, tl.cdiv(K, BLOCK_K)):
            k0 = kk * BLOCK_K
            a = x_desc.load([off_m, k0]).to(wty)
            if W_KMAJOR:
                acc = tl.dot(a, w_desc.load([k0, off_n]), acc)
                if GATED:
                    acc_up = tl.dot(a, wu_desc.load([k0, off_n]), acc_up)
            else:
                acc = tl.dot(a, tl.trans(w_desc.load([off_n, k0])), acc)
                if GATED:
                    acc_up = tl.dot(a, tl.trans(wu_desc.load([off_n, k0])), acc_up)
    else:
        x_bp = tl.make_block_ptr(x_ptr, shape=(M, K), strides=(stride_xm, 1), offsets=(off_m, 0),
                                 block_shape=(BLOCK_M, BLOCK_K), order=(1, 0))
        # order names the contiguous dimension: N for a packed K-major W, K for weight.t()
        if W_KMAJOR:
            w_bp = tl.make_block_ptr(w_ptr, shape=(K, N), strides=(stride_wk, stride_wn), offsets=(0, off_n),
                                     block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
        else:
            w_bp = tl.make_block_ptr(w_ptr, shape=(K, N), strides=(stride_wk, stride_wn), offsets=(0, off_n),
                                     block_shape=(BLOCK_K, BLOCK_N), order=(0, 1))
        if GATED:
            if W_KMAJOR:
                wu_bp = tl.make_block_ptr(w_ptr + UP_OFF * stride_wn, shape=(K, N), strides=(stride_wk, stride_wn),
                                          offsets=(0, off_n), block_shape=(BLOCK_K, BLOCK_N), order=(1, 0))
            else:
                wu_bp = tl.make_block_ptr(w_ptr + UP_OFF * stride_wn, shape=(K, N), strides=(stride_wk, stride_wn),
                                          offsets=(0, off_n), block_shape=(BLOCK_K, BLOCK_N), order=(0, 1))
        for kk in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(x_bp, boundary_check=(0, 1), padding_option="zero").to(wty)
            acc = tl.dot(a, tl.load(w_bp, boundary_check=(0, 1), padding_option="zero"), acc)
            if GATED:
                acc_up = tl.dot(a, tl.load(wu_bp, boundary_check=(0, 1), padding_option="zero"), acc_up)
                wu_bp = tl.advance(wu_bp, (BLOCK_K, 0))
            x_bp = tl.advance(x_bp, (0, BLOCK_K))
            w_bp = tl.advance(w_bp, (BLOCK_K, 0))

    offs_n = off_n + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, acc_up, b_ptr, offs_n, N, UP_OFF, HAS_BIAS, EPILOGUE)
    oty = o_ptr.dtype.element_ty
    if USE_DESC:
        if EPILOGUE == 3:
            r_desc = tl.make_tensor_descriptor(r_ptr, shape=[M, N], strides=[stride_rm, 1], block_shape=[BLOCK_M, BLOCK_N])
            acc = acc * res_scale + r_desc.load([off_m, off_n]).to(tl.float32)
        o_desc = tl.make_tensor_descriptor(o_ptr, shape=[M, N], strides=[stride_om, 1], block_shape=[BLOCK_M, BLOCK_N])
        o_desc.store([off_m, off_n], acc.to(oty))
    else:
        if EPILOGUE == 3:
            r_bp = tl.make_block_ptr(r_ptr, shape=(M, N), strides=(stride_rm, 1), offsets=(off_m, off_n),
                                     block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
            acc = acc * res_scale + tl.load(r_bp, boundary_check=(0, 1), padding_option="zero").to(tl.float32)
        o_bp = tl.make_block_ptr(o_ptr, shape=(M, N), strides=(stride_om, 1), offsets=(off_m, off_n),
                                 block_shape=(BLOCK_M, BLOCK_N), order=(1, 0))
        tl.store(o_bp, acc.to(oty), boundary_check=(0, 1))


_BEST: dict = {}  # launch cache: problem class -> triton.Config (tuned for this GPU, or autotuned)

# On CUDA, decode-sized GEMMs (M <= 64) take block pointers even when aligned: on the H200 the
# descriptor path cost ~45 us more host time per launch (in-kernel TMA descriptors need a scratch
# allocation per launch) for no GPU-time gain (M=16 K=4096 N=6144: 18.0 us desc vs 14.3-15.4 us
# block pointers, CUDA-graph timed). Prefill shapes gain from descriptors (M=4096 swiglu 1587 us vs
# 1861 us). XPU keeps descriptors everywhere: they lower to 2D block loads there (the
# huggingface/kernels xpu-kernels skill, https://github.com/huggingface/kernels, skills/xpu-kernels).
CUDA_DESC_MIN_M = 65


def prefer_descriptors(be: str, m: int, aligned: bool) -> bool:
    """The automatic memory-path choice (use_descriptors=None)."""
    if not aligned or not _backend.has_descriptors():
        return False
    if be == "cuda" and m < CUDA_DESC_MIN_M:
        return False
    return True


def _autotuner(be: str, swiglu: bool):
    n_b = 2 if swiglu else 1
    return _backend.autotuned(
        "gemm.swiglu" if swiglu else "gemm", _gemm_kernel, be,
        _backend.gemm_configs(be, n_b_tiles=n_b),
        key=["M_BUCKET", "N", "K", "HAS_BIAS", "EPILOGUE", "USE_DESC", "W_KMAJOR"],
        prune=_backend.gemm_prune(be, n_b),
    )


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """[..., C] -> [rows, C] with unit column stride, without copying when a view exists."""
    c = t.shape[-1]
    if t.dim() == 2 and t.stride(-1) == 1:
        return t
    if t.stride(-1) == 1:
        try:
            return t.view(-1, c)
        except RuntimeError:
            pass
    return t.reshape(-1, c).contiguous()


def _err(msg: str) -> ValueError:
    return ValueError(f"xpuinject_kernels: gemm: {msg}")


_CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps", "num_stages")


def _fixed_config(config: dict) -> triton.Config:
    """gemm's `config=` as a triton.Config (every key required)."""
    c = _backend.launch_config(config, _CONFIG_KEYS, "gemm")
    missing = [k for k in _CONFIG_KEYS if k not in c]
    if missing:
        raise _err(f"config lacks {', '.join(missing)} (want all of {', '.join(_CONFIG_KEYS)})")
    return triton.Config({k: c[k] for k in _CONFIG_KEYS[:4]}, num_warps=c["num_warps"], num_stages=c["num_stages"])


def gemm(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    residual: Optional[torch.Tensor] = None,
    epilogue: str = "none",
    use_descriptors: Optional[bool] = None,
    out_dtype: Optional[torch.dtype] = None,
    config: Optional[dict] = None,
    res_scale: float = 1.0,
) -> torch.Tensor:
    """out = epilogue(x @ w (+ bias)) with w [K, N]: pre-packed K-major, or a weight.t() view.

    x: [..., K]; w: [K, N] (swiglu: [K, 2I], gate | up); bias: [N] (swiglu: [2I]); residual:
    [..., N] for epilogue "residual". Returns [..., N] (swiglu: [..., I]) in out_dtype (default
    x.dtype; torch.float32 keeps the accumulator unrounded).
    use_descriptors: None = tensor descriptors when every operand is aligned, else block pointers;
    False forces block pointers; True requires descriptors (ValueError if an operand is misaligned
    or w is a weight.t() view, which block pointers read).
    config: launch constants {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M", "num_warps",
    "num_stages"}, all six, used instead of the autotuner's pick (for tuning); None autotunes.
    res_scale: epilogue "residual" adds res_scale * (x @ w (+ bias)) to the residual, one fp32
    multiply-add rounded once (Granite's residual_multiplier); 1 elsewhere.
    The op: torch.ops.<ns>.gemm (config passed as the six values in that order).
    """
    fixed: Tuple[int, ...] = ()
    if config is not None:
        c = _fixed_config(config)
        fixed = tuple(c.kwargs[k] for k in _CONFIG_KEYS[:4]) + (c.num_warps, c.num_stages)
    if _ops.traced(x):
        return _ops.call("gemm", x, w, bias, residual, epilogue, use_descriptors, out_dtype, list(fixed), float(res_scale))
    return _gemm(x, w, bias, residual, epilogue, use_descriptors, out_dtype, fixed, float(res_scale))


def _check(x, w, bias, residual, epilogue, out_dtype, res_scale=1.0):
    """Check every operand; returns (w is K-major, N of the output, output shape, output dtype)."""
    if epilogue not in _EPI_CODE:
        raise _err(f"unknown epilogue {epilogue!r} (want one of {', '.join(EPILOGUES)})")
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise _err("x and w must be tensors")
    if x.dtype not in _X_DTYPES:
        raise _err(f"x dtype {x.dtype} not supported (want bfloat16, float16 or float32)")
    if w.dtype not in _W_DTYPES:
        raise _err(f"weight dtype {w.dtype} not supported (want the packed bfloat16 or float16 [K, N])")
    if w.dim() != 2:
        raise _err(f"weight shape {tuple(w.shape)}: want 2-D K-major [K, N]")
    if x.dim() < 1 or x.shape[-1] != w.shape[0]:
        raise _err(f"x shape {tuple(x.shape)} does not match weight [K, N] = {tuple(w.shape)} (x's last dim must be K)")
    if w.shape[0] == 0 or w.shape[1] == 0:
        raise _err(f"weight shape {tuple(w.shape)} has an empty dimension")
    if w.stride(-1) == 1:
        kmajor = True
    elif w.stride(0) == 1:
        kmajor = False  # weight.t() of a row-major nn.Linear weight
    else:
        raise _err(f"weight strides {tuple(w.stride())}: want K-major [K, N] rows or a transposed [N, K] weight")
    if out_dtype is None:
        out_dtype = x.dtype
    elif out_dtype not in _X_DTYPES:
        raise _err(f"out_dtype {out_dtype} not supported (want bfloat16, float16 or float32)")
    if w.device != x.device:
        raise _err(f"weight on {w.device}, x on {x.device}")
    n_w = w.shape[1]
    swiglu = epilogue in _GATED
    if swiglu and n_w % 2 != 0:
        raise _err(f"{epilogue} weight has {n_w} columns: want an even [K, 2I] (gate | up)")
    n = n_w // 2 if swiglu else n_w
    if epilogue == "bias" and bias is None:
        raise _err("epilogue 'bias' needs a bias tensor")
    if epilogue == "none" and bias is not None:
        raise _err("a bias was given with epilogue 'none' (use epilogue='bias')")
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.shape[0] != n_w:
            raise _err(f"bias shape {tuple(getattr(bias, 'shape', ()))}: want [{n_w}]")
        if not bias.dtype.is_floating_point:
            raise _err(f"bias dtype {bias.dtype} not supported")
        if bias.device != x.device:
            raise _err(f"bias on {bias.device}, x on {x.device}")
    out_shape = tuple(x.shape[:-1]) + (n,)
    if epilogue == "residual":
        if not isinstance(residual, torch.Tensor) or tuple(residual.shape) != out_shape:
            raise _err(f"residual shape {tuple(getattr(residual, 'shape', ()))}: want {out_shape}")
        if not residual.dtype.is_floating_point:
            raise _err(f"residual dtype {residual.dtype} not supported")
        if residual.device != x.device:
            raise _err(f"residual on {residual.device}, x on {x.device}")
    elif residual is not None:
        raise _err(f"a residual was given with epilogue {epilogue!r} (use epilogue='residual')")
    if res_scale != 1.0 and epilogue != "residual":
        raise _err(f"res_scale {res_scale} scales the residual epilogue's branch; epilogue is {epilogue!r}")
    return kmajor, n, out_shape, out_dtype


def _gemm_fake(x, w, bias, residual, epilogue, use_descriptors, out_dtype, config, res_scale=1.0):
    _, _, out_shape, out_dtype = _check(x, w, bias, residual, epilogue, out_dtype, res_scale)
    return x.new_empty(out_shape, dtype=out_dtype)


def _gemm(x, w, bias, residual, epilogue, use_descriptors, out_dtype, config, res_scale=1.0) -> torch.Tensor:
    kmajor, n, out_shape, out_dtype = _check(x, w, bias, residual, epilogue, out_dtype, res_scale)
    fixed = None
    if config:
        c = dict(zip(_CONFIG_KEYS, config))
        fixed = triton.Config({k: c[k] for k in _CONFIG_KEYS[:4]}, num_warps=c["num_warps"], num_stages=c["num_stages"])
    if bias is not None:
        bias = bias.contiguous()
    k, n_w = w.shape
    swiglu = epilogue in _GATED
    be = _backend.require_runnable(x, "gemm")
    out = _backend.empty(out_shape, out_dtype, x.device)
    x2 = _as_rows(x)
    m = x2.shape[0]
    if m == 0:
        return out
    o2 = out.view(-1, n)
    r2 = _as_rows(residual) if residual is not None else None
    if fixed is None and use_descriptors is None and gemv.supports(m, kmajor, be, n_w):
        # decode-sized M: split-K over the weight, reduced in the same launch (gemv.py)
        gemv.gemv(x2, w, bias, r2, o2, epilogue, res_scale=res_scale)
        _backend.count(f"gemm.{epilogue}")
        return out
    up_off = n if swiglu else 0

    # descriptors see an N-major weight as the [N, K] tensor it is
    w_rows = w if kmajor else w.t()
    operands = [x2, w_rows, o2] + ([r2] if r2 is not None else []) + ([w_rows[:, n:] if kmajor else w_rows[n:]]
                                                                       if swiglu else [])

    def aligned() -> bool:
        return all(_backend.tma_ok(t) for t in operands)

    if use_descriptors is None:
        # The cheap conditions first: a CUDA decode step never takes descriptors, so it skips
        # the alignment checks (~10 us of host time per call on the dev VM, of ~27 us).
        # an N-major weight takes block pointers unless asked: descriptors of its [N, K] rows are
        # not measured against them (and the XPU backend does not lower the transposed tile)
        use_desc = kmajor and prefer_descriptors(be, m, True) and aligned()
    elif use_descriptors:
        if not aligned():
            raise _err("use_descriptors=True but an operand is not 16-byte aligned (base or row stride)")
        if not _backend.has_descriptors():
            raise _err(f"use_descriptors=True but triton {triton.__version__} has no tl.make_tensor_descriptor")
        use_desc = True
    else:
        use_desc = False
    if use_desc:
        _backend.ensure_allocator(x.device)

    m_bucket = _backend.next_pow2(m)
    args = (
        x2, w, bias if bias is not None else w, r2 if r2 is not None else o2, o2,
        m, n, k, m_bucket,
        x2.stride(0), w.stride(0), w.stride(1), r2.stride(0) if r2 is not None else 0, o2.stride(0),
        up_off, float(res_scale),
    )
    flags = dict(HAS_BIAS=bias is not None, EPILOGUE=_EPI_CODE[epilogue], USE_DESC=use_desc, W_KMAJOR=kmajor)
    # Launch cache: once the autotuner picked a config for this problem class, launch the jit
    # function with it directly. The autotuner's per-call bookkeeping cost ~40% of a ~120 us
    # launch on the H200 host (cProfile, M=16 decode GEMM); any config is correct, so a stale
    # entry could only cost speed.
    lkey = (be, _backend.is_interpret(), x.dtype, w.dtype, None if bias is None else bias.dtype,
            None if residual is None else residual.dtype, m_bucket, n, k, flags["HAS_BIAS"], flags["EPILOGUE"], use_desc,
            kmajor, out_dtype)
    cfg = fixed if fixed is not None else _BEST.get(lkey)
    if cfg is not None:
        _backend.count("gemm.launch_cached")
    else:
        # The config tuned on this GPU model (gpus/<gpu>.json); else the interpreter's one tile
        # sized by the problem, or on a GPU one derived from the shape (gpus.heuristic_config:
        # autotuning only when asked).
        cfg = gpus.tuned_config("gemm", {"epilogue": epilogue, "m_bucket": m_bucket, "k": k, "n": n_w}, x.device)
        if cfg is None and _backend.is_interpret():
            cfg = _backend.interpret_gemm_config(m, n)
        elif cfg is None:
            cfg = gpus.heuristic_config("gemm", {"epilogue": epilogue, "m_bucket": m_bucket, "k": k, "n": n_w},
                                        lambda: _backend.gemm_heuristic(be, m, n, k, 2 if swiglu else 1))
        if cfg is not None:
            _BEST[lkey] = cfg
    if cfg is not None:
        grid = (_backend.cdiv(m, cfg.kwargs["BLOCK_M"]) * _backend.cdiv(n, cfg.kwargs["BLOCK_N"]),)
        _gemm_kernel[grid](*args, **flags, **cfg.all_kwargs())
    else:
        kern = _autotuner(be, swiglu)

        def grid(meta):
            return (_backend.cdiv(m, meta["BLOCK_M"]) * _backend.cdiv(n, meta["BLOCK_N"]),)

        kern[grid](*args, **flags)
        if getattr(kern, "best_config", None) is not None:
            _BEST[lkey] = kern.best_config
    _backend.count("gemm.desc" if use_desc else "gemm.blockptr")
    _backend.count(f"gemm.{epilogue}")
    return out


_ops.define(
    "gemm",
    "(Tensor x, Tensor w, Tensor? bias, Tensor? residual, str epilogue, bool? use_descriptors, ScalarType? out_dtype, "
    "int[] config, float res_scale=1.0) -> Tensor",
    _gemm, _gemm_fake,
)


def add_rms_norm_gemm(
    x: torch.Tensor,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    epilogue: str = "none",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(new_residual, out) = (x + residual, gemm(rms_norm(x + residual), w, bias, epilogue)): the
    post-attention add + RMSNorm (Llama's order, rmsnorm.py) and the next projection. A
    decode-sized call on a packed weight (gemv.py) runs it as one launch, the norm in the GEMV's
    prologue; any other call runs add_rms_norm, then gemm. x, residual: [..., K] of one dtype;
    norm_weight: [K] of that dtype. The op: torch.ops.<ns>.add_rms_norm_gemm."""
    if _ops.traced(x):
        return _ops.call("add_rms_norm_gemm", x, residual, norm_weight, float(eps), w, bias, epilogue)
    return _add_rms_norm_gemm(x, residual, norm_weight, eps, w, bias, epilogue)


def _fused_norm_ok(x, residual, norm_weight, w, epilogue) -> bool:
    same = residual.dtype == x.dtype and tuple(residual.shape) == tuple(x.shape)
    return same and _row_norm_ok(x, norm_weight, w, epilogue)


def _rows(t: torch.Tensor) -> int:
    return t.numel() // t.shape[-1] if t.shape[-1] else 0


def _add_rms_norm_gemm(x, residual, norm_weight, eps, w, bias, epilogue):
    from .rmsnorm import add_rms_norm

    if not _fused_norm_ok(x, residual, norm_weight, w, epilogue):
        new_res, normed = add_rms_norm(x, residual, norm_weight, eps)
        return new_res, gemm(normed, w, bias=bias, epilogue=epilogue)
    _, n, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    _backend.require_runnable(x, "add_rms_norm_gemm")
    x2, r0 = _as_rows(x), _as_rows(residual)
    new_res = _backend.empty(x.shape, x.dtype, x.device)
    out = _backend.empty(out_shape, out_dtype, x.device)
    gemv.gemv(x2, w, bias.contiguous() if bias is not None else None, None, out.view(-1, n), epilogue,
              norm=(r0, norm_weight.contiguous(), eps, new_res.view(-1, x.shape[-1])))
    _backend.count("add_rms_norm_gemm")
    return new_res, out


def _add_rms_norm_gemm_fake(x, residual, norm_weight, eps, w, bias, epilogue):
    _, _, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    return x.new_empty(x.shape), x.new_empty(out_shape, dtype=out_dtype)


_ops.define(
    "add_rms_norm_gemm",
    "(Tensor x, Tensor residual, Tensor norm_weight, float eps, Tensor w, Tensor? bias, str epilogue) -> (Tensor, Tensor)",
    _add_rms_norm_gemm, _add_rms_norm_gemm_fake,
)


# Whether rms_norm_gemm runs as one launch: None (XPUINJECT_FUSE_INPUT_NORM unset) where launches
# do not overlap (_backend.fuse_norm says why), True / False ("1" / "0") always / never.
FUSE_INPUT_NORM = _backend.env_switch("XPUINJECT_FUSE_INPUT_NORM")


def rms_norm_gemm(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    epilogue: str = "none",
) -> torch.Tensor:
    """gemm(rms_norm(x, norm_weight, eps), w, bias, epilogue): a decoder layer's input RMSNorm and
    the projection after it. A decode-sized call on a packed weight runs as one GEMV launch
    (gemv.py, row_norm) whose dot takes x * norm_weight and whose accumulator each row's rstd
    scales, the same math with one rounding of the normalized input where Llama's order has two,
    where FUSE_INPUT_NORM lets it; any other call runs rms_norm, then gemm. x: [..., K] bf16/fp16;
    norm_weight: [K] of x's dtype.
    The op: torch.ops.<ns>.rms_norm_gemm."""
    if _ops.traced(x):
        return _ops.call("rms_norm_gemm", x, norm_weight, float(eps), w, bias, epilogue)
    return _rms_norm_gemm(x, norm_weight, eps, w, bias, epilogue)


def _row_norm_ok(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, epilogue: str = "none") -> bool:
    """Whether a norm of x's rows by norm_weight may run inside a GEMV on w (rms_norm_gemm, and
    with a residual of x's shape and dtype add_rms_norm_gemm)."""
    return (epilogue != "residual" and x.dtype in (torch.bfloat16, torch.float16) and norm_weight.dtype == x.dtype
            and norm_weight.dim() == 1 and norm_weight.shape[0] == x.shape[-1] and w.dim() == 2
            and (w.stride(1) == 1 or w.stride(0) == 1)
            and gemv.supports(_rows(x), w.stride(1) == 1, _backend.backend(x), w.shape[1]))


def _rms_norm_gemm(x, norm_weight, eps, w, bias, epilogue):
    from .rmsnorm import rms_norm

    if not (_row_norm_ok(x, norm_weight, w, epilogue) and _backend.fuse_norm(FUSE_INPUT_NORM, x.device)):
        return gemm(rms_norm(x, norm_weight, eps), w, bias=bias, epilogue=epilogue)
    if not eps >= 0.0:
        raise _err(f"rms_norm_gemm: eps must be >= 0, got {eps}")
    _, n, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    _backend.require_runnable(x, "rms_norm_gemm")
    out = _backend.empty(out_shape, out_dtype, x.device)
    gemv.gemv(_as_rows(x), w, bias.contiguous() if bias is not None else None, None, out.view(-1, n), epilogue,
              row_norm=(norm_weight.contiguous(), float(eps)))
    _backend.count("rms_norm_gemm")
    return out


def _rms_norm_gemm_fake(x, norm_weight, eps, w, bias, epilogue):
    _, _, out_shape, out_dtype = _check(x, w, bias, None, epilogue, None)
    return x.new_empty(out_shape, dtype=out_dtype)


_ops.define(
    "rms_norm_gemm",
    "(Tensor x, Tensor norm_weight, float eps, Tensor w, Tensor? bias, str epilogue) -> Tensor",
    _rms_norm_gemm, _rms_norm_gemm_fake,
)


def gemm_ref(x, w, bias=None, residual=None, epilogue="none", res_scale=1.0):
    """fp32 reference: same math, no rounding until the caller casts."""
    y = x.float() @ w.float()
    if bias is not None:
        y = y + bias.float()
    if epilogue in _GATED:
        i = w.shape[1] // 2
        g, u = y[..., :i], y[..., i:]
        if epilogue == "geglu":
            return torch.nn.functional.gelu(g, approximate="tanh") * u
        if epilogue == "geglu_erf":
            return torch.nn.functional.gelu(g) * u
        return torch.nn.functional.silu(g) * u
    if epilogue == "hardswish":
        return torch.nn.functional.hardswish(y)
    if epilogue == "residual":
        return y * res_scale + residual.float()
    return y


from . import gemv  # noqa: E402  (gemv.py takes its epilogue from this module)
