"""RMSNorm and fused residual-add + RMSNorm.

Numerics mirror transformers' LlamaRMSNorm.forward (transformers 5.17 modeling_llama.py):

    h = x.to(float32); h = h * rsqrt(mean(h^2) + eps); return weight * h.to(x.dtype)

i.e. normalize in fp32, round to the activation dtype, THEN multiply by the weight in
promote(weight.dtype, x.dtype) (the product of two bf16 tensors is computed in fp32 and rounded
once). The kernel reproduces both roundings, so a bf16 output matches stock bf16 up to the
summation order of the variance.

Fused add: new_residual = x + residual rounded to the activation dtype (as transformers adds two
bf16 tensors), normed = rmsnorm(new_residual).

Gemma's order (`rms_norm_gemma`, `add_rms_norm_gemma`; Gemma2RMSNorm.forward, transformers 5.17
models/gemma2/modeling_gemma2.py): h = x.float() * rsqrt(mean(h^2) + eps); h * (1 + w.float());
rounded once to x's dtype. The kernel takes the fp32 (1 + w) folded offline (or made from the
module's weight on first use) and skips the rounding before the multiply. OLMo 2's norm
(Olmo2RMSNorm) is that order on its own weight; `rms_norm_fp32_add` adds the block's residual to
its rounded output in the same pass (the block normalizes each branch before adding it).
`rms_norm_add` is the same pass on Llama's order (EXAONE 4's block normalizes each branch, and
GLM-4's its MLP's output, with Llama's RMSNorm before the residual add).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import _backend, _ops

__all__ = ["rms_norm", "add_rms_norm", "rms_norm_gemma", "add_rms_norm_gemma", "rms_norm_fp32_add", "rms_norm_add",
           "rms_norm_ref",
           "add_rms_norm_ref", "rms_norm_gemma_ref", "MAX_BLOCK"]

# Largest row chunk one program holds in registers (fp32: 32 KiB per program). Rows wider than this
# take the two-pass loop (sum of squares, then normalize); every Llama/Qwen hidden size up to 8192
# is a single pass.
MAX_BLOCK = 8192

_ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
    N, stride_x, stride_res, stride_out, stride_res_out, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, SINGLE: tl.constexpr, ROUND_NORMED: tl.constexpr = True,
    PDL: tl.constexpr = False, ADD_AFTER: tl.constexpr = False,
):
    _backend.pdl_wait(PDL)
    # int64 row offsets: rows * stride can pass 2^31 elements for long prefills.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    out_row = out_ptr + row * stride_out
    act_ty = x_ptr.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        if HAS_RESIDUAL:
            r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
            # add in fp32, round once to the activation dtype: what a bf16 torch add does.
            x = (x.to(tl.float32) + r.to(tl.float32)).to(act_ty)
            tl.store(res_out_ptr + row * stride_res_out + cols, x, mask=mask)
        xf = x.to(tl.float32)
        var = tl.sum(xf * xf, axis=0) / N
        rstd = 1.0 / tl.sqrt(var + eps)
        normed = xf * rstd
        if ROUND_NORMED:  # Llama rounds before the weight; Gemma multiplies in fp32
            normed = normed.to(act_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (w * normed).to(out_ptr.dtype.element_ty)
        if ADD_AFTER:  # residual + the rounded norm, rounded again: a torch add of the two
            r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
            y = (y.to(tl.float32) + r.to(tl.float32)).to(out_ptr.dtype.element_ty)
        tl.store(out_row + cols, y, mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c, mask=mask, other=0.0)
            if HAS_RESIDUAL:
                r = tl.load(res_ptr + row * stride_res + c, mask=mask, other=0.0)
                x = (x.to(tl.float32) + r.to(tl.float32)).to(act_ty)
                tl.store(res_out_ptr + row * stride_res_out + c, x, mask=mask)
            xf = x.to(tl.float32)
            acc += xf * xf
        var = tl.sum(acc, axis=0) / N
        rstd = 1.0 / tl.sqrt(var + eps)
        for start in range(0, N, BLOCK):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c, mask=mask, other=0.0)
            if HAS_RESIDUAL:
                # recompute the rounded sum (bit-identical to what pass 1 stored) rather than
                # re-reading our own stores
                r = tl.load(res_ptr + row * stride_res + c, mask=mask, other=0.0)
                x = (x.to(tl.float32) + r.to(tl.float32)).to(act_ty)
            normed = x.to(tl.float32) * rstd
            if ROUND_NORMED:
                normed = normed.to(act_ty).to(tl.float32)
            w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
            y = (w * normed).to(out_ptr.dtype.element_ty)
            if ADD_AFTER:
                r = tl.load(res_ptr + row * stride_res + c, mask=mask, other=0.0)
                y = (y.to(tl.float32) + r.to(tl.float32)).to(out_ptr.dtype.element_ty)
            tl.store(out_row + c, y, mask=mask)


@triton.jit
def rows_rstd(x_ptr, r_ptr, row0, n_rows, N, stride_x, stride_r, eps, ROWS: tl.constexpr, OUT: tl.constexpr,
              BLOCK: tl.constexpr, HAS_R: tl.constexpr):
    """[OUT] fp32 rstd = 1 / sqrt(mean(s^2) + eps) of the ROWS rows from row0 (those below n_rows),
    s = x, or with HAS_R x + r rounded to x's dtype (as add_rms_norm rounds it), the squares
    summed over all N in BLOCK chunks: entry j is row row0 + j's, entries past ROWS are 0. For a
    kernel that normalizes rows inside a tl.dot tile of OUT rows (the GEMV's and the router's)."""
    rows = row0 + tl.arange(0, ROWS)
    ok = rows < n_rows
    rows = rows.to(tl.int64)
    ss = tl.zeros((ROWS,), dtype=tl.float32)
    for c0 in range(0, N, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = ok[:, None] & (cols < N)[None, :]
        v = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
        if HAS_R:
            v = (v + tl.load(r_ptr + rows[:, None] * stride_r + cols[None, :], mask=m, other=0.0).to(tl.float32))
            v = v.to(x_ptr.dtype.element_ty).to(tl.float32)
        ss += tl.sum(v * v, axis=1)
    rstd = 1.0 / tl.sqrt(ss / N + eps)
    return tl.sum(tl.where(tl.arange(0, OUT)[:, None] == tl.arange(0, ROWS)[None, :], rstd[None, :], 0.0), axis=1)


def _rows(t: torch.Tensor, name: str) -> torch.Tensor:
    """View t as [rows, N] with unit column stride; copies only if no such view exists."""
    n = t.shape[-1]
    if t.dim() == 2 and t.stride(-1) == 1:
        return t
    if t.stride(-1) == 1:
        try:
            return t.view(-1, n)
        except RuntimeError:
            pass
    return t.reshape(-1, n).contiguous()


def _check(x: torch.Tensor, weight: torch.Tensor, eps: float, what: str) -> None:
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise ValueError(f"xpuinject_kernels: {what}: x and weight must be tensors")
    if x.dtype not in _ACT_DTYPES:
        raise ValueError(f"xpuinject_kernels: {what}: x dtype {x.dtype} not supported (want bfloat16, float16 or float32)")
    if weight.dtype not in _ACT_DTYPES:
        raise ValueError(f"xpuinject_kernels: {what}: weight dtype {weight.dtype} not supported")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"xpuinject_kernels: {what}: x shape {tuple(x.shape)} has no hidden dimension")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f"xpuinject_kernels: {what}: weight shape {tuple(weight.shape)} does not match hidden size {x.shape[-1]}"
        )
    if weight.device != x.device:
        raise ValueError(f"xpuinject_kernels: {what}: weight on {weight.device}, x on {x.device}")
    if not (eps >= 0.0):
        raise ValueError(f"xpuinject_kernels: {what}: eps must be >= 0, got {eps}")


# Every launch of _rms_norm_kernel takes these (the offline compile checks read them too).
LAUNCH_OPTIONS = _backend.exact_rounding_kw()


def _launch(x2, r2, w, out2, rout2, eps, warps=None, round_normed=True, add_after=None):
    """The kernel launch on validated [rows, N] operands; warps overrides num_warps(block);
    round_normed=False is Gemma's order (no rounding before the weight); add_after: a [rows, N]
    residual the output is added to (after the norm; r2 must then be None)."""
    n = x2.shape[1]
    block = min(_backend.next_pow2(n), MAX_BLOCK)
    has_res = r2 is not None
    res = r2 if has_res else add_after
    pdl = _backend.pdl(x2.device)
    _rms_norm_kernel[(x2.shape[0],)](
        x2, res if res is not None else x2, w, out2, rout2 if has_res else out2,
        n, x2.stride(0), res.stride(0) if res is not None else 0, out2.stride(0), rout2.stride(0) if has_res else 0,
        float(eps),
        HAS_RESIDUAL=has_res, BLOCK=block, SINGLE=n <= block, ROUND_NORMED=round_normed,
        PDL=pdl, ADD_AFTER=add_after is not None, num_warps=warps or num_warps(block), **_backend.pdl_kw(pdl),
        **LAUNCH_OPTIONS,
    )


def num_warps(block: int) -> int:
    """Warps of the one-row-per-program kernel. H200 sweep (benchmarks/tune.py;
    docs/results/2026-11-29-h200/sweep-rmsnorm-rope.csv), M=16384, fraction of the measured copy
    bandwidth: N=2048 RMSNorm 4 warps 91.8% (2: 91.1%, 8: 87.8%, 16: 62.1%), N=4096 4 warps 92.8%
    (2: 94.5%, 8: 93.4%, 16: 86.4% -- the old block//256 rule's pick); add+RMSNorm 94.4-95.5% at 2-8
    warps. Short rows (q/k norms over one head) keep ~256 elements per warp."""
    if block <= 1024:
        return _backend.rowwise_num_warps(block)
    return min(8, max(4, block // 1024))


_CONFIG_KEYS = ("num_warps",)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, config: Optional[dict] = None) -> torch.Tensor:
    """y = weight * (x * rsqrt(mean(x^2, -1) + eps)).to(x.dtype), LlamaRMSNorm numerics.

    x: [..., N] bf16/fp16/fp32, any leading shape and row stride; weight: [N]. Returns a new
    contiguous tensor of x's shape in promote(weight.dtype, x.dtype).
    config: {"num_warps": n} launches with n warps instead of `num_warps(block)` (for tuning);
    None (default) uses the rule. The op: torch.ops.<ns>.rms_norm (_ops.py).
    """
    warps = _warps(config, "rms_norm")
    if _ops.traced(x):
        return _ops.call("rms_norm", x, weight, float(eps), warps)
    return _rms_norm(x, weight, eps, warps)


def _warps(config: Optional[dict], what: str) -> int:
    """config's num_warps, 0 for the rule's choice."""
    if config is None:
        return 0
    return _backend.launch_config(config, _CONFIG_KEYS, what).get("num_warps", 0)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, num_warps: int) -> torch.Tensor:
    _check(x, weight, eps, "rms_norm")
    _backend.require_runnable(x, "rms_norm")
    out_dtype = torch.promote_types(weight.dtype, x.dtype)
    out = _backend.empty(x.shape, out_dtype, x.device)
    if x.numel() == 0:
        return out
    x2 = _rows(x, "x")
    _launch(x2, None, weight.contiguous(), out.view(-1, x.shape[-1]), None, eps, warps=num_warps or None)
    _backend.count("rms_norm")
    return out


def _rms_norm_fake(x, weight, eps, num_warps):
    _check(x, weight, eps, "rms_norm")
    return x.new_empty(x.shape, dtype=torch.promote_types(weight.dtype, x.dtype))


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, config: Optional[dict] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMSNorm: returns (new_residual, normed) with
    new_residual = (x + residual) in x.dtype and normed = rms_norm(new_residual, weight, eps).

    x and residual: same shape and dtype, any row strides. config: as for rms_norm.
    The op: torch.ops.<ns>.add_rms_norm.
    """
    warps = _warps(config, "add_rms_norm")
    if _ops.traced(x):
        return _ops.call("add_rms_norm", x, residual, weight, float(eps), warps)
    return _add_rms_norm(x, residual, weight, eps, warps)


def _check_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    _check(x, weight, eps, "add_rms_norm")
    if not isinstance(residual, torch.Tensor) or residual.shape != x.shape:
        raise ValueError(
            f"xpuinject_kernels: add_rms_norm: residual shape {tuple(getattr(residual, 'shape', ()))} != x shape {tuple(x.shape)}"
        )
    if residual.dtype != x.dtype:
        raise ValueError(f"xpuinject_kernels: add_rms_norm: residual dtype {residual.dtype} != x dtype {x.dtype}")
    if residual.device != x.device:
        raise ValueError(f"xpuinject_kernels: add_rms_norm: residual on {residual.device}, x on {x.device}")


def _add_rms_norm(x, residual, weight, eps, num_warps):
    _check_add(x, residual, weight, eps)
    _backend.require_runnable(x, "add_rms_norm")
    out = _backend.empty(x.shape, torch.promote_types(weight.dtype, x.dtype), x.device)
    new_res = _backend.empty(x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return new_res, out
    n = x.shape[-1]
    _launch(_rows(x, "x"), _rows(residual, "residual"), weight.contiguous(), out.view(-1, n), new_res.view(-1, n), eps,
            warps=num_warps or None)
    _backend.count("add_rms_norm")
    return new_res, out


def _add_rms_norm_fake(x, residual, weight, eps, num_warps):
    _check_add(x, residual, weight, eps)
    return x.new_empty(x.shape), x.new_empty(x.shape, dtype=torch.promote_types(weight.dtype, x.dtype))


_ops.define("rms_norm", "(Tensor x, Tensor weight, float eps, int num_warps) -> Tensor", _rms_norm, _rms_norm_fake)
_ops.define("add_rms_norm", "(Tensor x, Tensor residual, Tensor weight, float eps, int num_warps) -> (Tensor, Tensor)",
            _add_rms_norm, _add_rms_norm_fake)


def rms_norm_gemma(x: torch.Tensor, weight: torch.Tensor, eps: float, config: Optional[dict] = None) -> torch.Tensor:
    """y = (x * rsqrt(mean(x^2, -1) + eps) * weight).to(x.dtype), all in fp32 and rounded once:
    Gemma's RMSNorm with weight = 1 + w (fp32, folded offline). Returns x's shape and dtype.
    The op: torch.ops.<ns>.rms_norm_gemma."""
    warps = _warps(config, "rms_norm_gemma")
    if _ops.traced(x):
        return _ops.op("rms_norm_gemma")(x, weight, float(eps), warps)
    return _rms_norm_gemma(x, weight, eps, warps)


def _rms_norm_gemma(x, weight, eps, num_warps):
    _check(x, weight, eps, "rms_norm_gemma")
    _backend.require_runnable(x, "rms_norm_gemma")
    out = _backend.empty(x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return out
    _launch(_rows(x, "x"), None, weight.contiguous(), out.view(-1, x.shape[-1]), None, eps, warps=num_warps or None,
            round_normed=False)
    _backend.count("rms_norm_gemma")
    return out


def _rms_norm_gemma_fake(x, weight, eps, num_warps):
    _check(x, weight, eps, "rms_norm_gemma")
    return x.new_empty(x.shape)


def add_rms_norm_gemma(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                       config: Optional[dict] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + Gemma RMSNorm: (new_residual, normed), new_residual = (x + residual)
    in x.dtype, normed = rms_norm_gemma(new_residual, weight, eps) in x.dtype.
    The op: torch.ops.<ns>.add_rms_norm_gemma."""
    warps = _warps(config, "add_rms_norm_gemma")
    if _ops.traced(x):
        return _ops.op("add_rms_norm_gemma")(x, residual, weight, float(eps), warps)
    return _add_rms_norm_gemma(x, residual, weight, eps, warps)


def _add_rms_norm_gemma(x, residual, weight, eps, num_warps):
    _check_add(x, residual, weight, eps)
    _backend.require_runnable(x, "add_rms_norm_gemma")
    out = _backend.empty(x.shape, x.dtype, x.device)
    new_res = _backend.empty(x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return new_res, out
    n = x.shape[-1]
    _launch(_rows(x, "x"), _rows(residual, "residual"), weight.contiguous(), out.view(-1, n), new_res.view(-1, n), eps,
            warps=num_warps or None, round_normed=False)
    _backend.count("add_rms_norm_gemma")
    return new_res, out


def _add_rms_norm_gemma_fake(x, residual, weight, eps, num_warps):
    _check_add(x, residual, weight, eps)
    return x.new_empty(x.shape), x.new_empty(x.shape)


_ops.define("rms_norm_gemma", "(Tensor x, Tensor weight, float eps, int num_warps) -> Tensor", _rms_norm_gemma,
            _rms_norm_gemma_fake)
_ops.define("add_rms_norm_gemma", "(Tensor x, Tensor residual, Tensor weight, float eps, int num_warps) -> (Tensor, Tensor)",
            _add_rms_norm_gemma, _add_rms_norm_gemma_fake)


def rms_norm_fp32_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                     config: Optional[dict] = None) -> torch.Tensor:
    """residual + rms_norm_gemma(x, weight, eps), the norm rounded to x's dtype and the sum rounded
    again, as a block that normalizes its branch before the residual add computes them (OLMo 2:
    Olmo2RMSNorm, whose weight multiplies the unrounded fp32 row, then a torch add), in one pass.
    The op: torch.ops.<ns>.rms_norm_fp32_add."""
    warps = _warps(config, "rms_norm_fp32_add")
    if _ops.traced(x):
        return _ops.op("rms_norm_fp32_add")(x, residual, weight, float(eps), warps)
    return _rms_norm_fp32_add(x, residual, weight, eps, warps)


def _rms_norm_fp32_add(x, residual, weight, eps, num_warps):
    return _norm_add(x, residual, weight, eps, num_warps, "rms_norm_fp32_add", round_normed=False)


def _norm_add(x, residual, weight, eps, num_warps, what: str, round_normed: bool):
    _check_add(x, residual, weight, eps)
    _backend.require_runnable(x, what)
    out = _backend.empty(x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return out
    n = x.shape[-1]
    _launch(_rows(x, "x"), None, weight.contiguous(), out.view(-1, n), None, eps, warps=num_warps or None,
            round_normed=round_normed, add_after=_rows(residual, "residual"))
    _backend.count(what)
    return out


def _rms_norm_fp32_add_fake(x, residual, weight, eps, num_warps):
    _check_add(x, residual, weight, eps)
    return x.new_empty(x.shape)


_ops.define("rms_norm_fp32_add", "(Tensor x, Tensor residual, Tensor weight, float eps, int num_warps) -> Tensor",
            _rms_norm_fp32_add, _rms_norm_fp32_add_fake)


def rms_norm_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 config: Optional[dict] = None) -> torch.Tensor:
    """residual + rms_norm(x, weight, eps): Llama's norm (rounded before the weight and after it),
    then the sum rounded again, as a block that normalizes its branch with LlamaRMSNorm before
    the residual add computes them (EXAONE 4's post-branch norms, GLM-4's post_mlp_layernorm), in
    one pass. The op: torch.ops.<ns>.rms_norm_add."""
    warps = _warps(config, "rms_norm_add")
    if _ops.traced(x):
        return _ops.op("rms_norm_add")(x, residual, weight, float(eps), warps)
    return _rms_norm_add(x, residual, weight, eps, warps)


def _rms_norm_add(x, residual, weight, eps, num_warps):
    return _norm_add(x, residual, weight, eps, num_warps, "rms_norm_add", round_normed=True)


_ops.define("rms_norm_add", "(Tensor x, Tensor residual, Tensor weight, float eps, int num_warps) -> Tensor",
            _rms_norm_add, _rms_norm_fp32_add_fake)


def rms_norm_gemma_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """float64 reference of Gemma's norm from the raw weight w: x / rms(x) * (1 + w), unrounded."""
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.double())


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 reference: weight * x * rsqrt(mean(x^2) + eps) with no intermediate rounding."""
    xf = x.float()
    return weight.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


def add_rms_norm_ref(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """fp32 reference of the fused op: (x + residual, rms_norm_ref(x + residual))."""
    s = x.float() + residual.float()
    return s, rms_norm_ref(s, weight, eps)
