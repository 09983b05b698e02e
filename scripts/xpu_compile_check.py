"""Compile every xpuinject Triton kernel for an Intel XPU target, offline, with the XPU autotune
configs: Triton source -> TTIR -> TTGIR -> LLVM IR -> SPIR-V, no XPU device needed.

No XPU exists on our machines, so this is how the XPU paths are checked: the Intel XPU backend
for Triton (the `triton-xpu` wheel) lowers each kernel at each config it would autotune over, and
every failure is printed with the config. Native code (`ocloc`) and running are not covered.

    scripts/xpu-compile-check.sh          # makes .xpu-venv (triton-xpu, intel-sycl-rt) and runs this
    scripts/xpu-compile-check.sh --only moe   # the cases whose name starts with "moe"

It runs under the XPU Triton, with torch taken from the project's .venv (only for dtypes).
Arguments are mocked from dtypes (JITFunction.warmup), and a stand-in Triton driver reports the
XPU target (Data Center GPU Max, subgroup 16, 2D block I/O and DPAS), so nothing needs a device.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "kernels" / "python"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

# Intel Data Center GPU Max (PVC) properties, as the XPU driver would report them.
PVC = {
    "architecture": 0, "name": "Intel(R) Data Center GPU Max 1550", "max_work_group_size": 1024,
    "max_num_sub_groups": 64, "sub_group_sizes": [16, 32], "has_fp64": True,
    "has_subgroup_matrix_multiply_accumulate": True, "has_subgroup_2d_block_io": True,
    "has_bfloat16_conversions": True,
}


def block_reads(llir: str) -> int:
    """The subgroup 2D block reads in a kernel's LLVM IR (Xe's block loads: how block pointers and
    descriptors lower where the target has 2D block I/O)."""
    import re

    return len(re.findall(r"call [^\n]*2d[_.]?block[_.]?read", llir, flags=re.IGNORECASE))


class TargetDriver:
    """Just enough of a Triton driver for JITFunction.warmup: the target, device 0, stream 0."""

    def __init__(self, target: GPUTarget):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def grf_option(value: str) -> str:
    """Our configs say grf_mode "256" (newer Intel Triton); older triton-xpu releases
    spell the same 256-register mode "large"."""
    from triton.backends.intel.compiler import XPUOptions

    default = XPUOptions.__dataclass_fields__["grf_mode"].default
    if isinstance(default, tuple) and value == "256" and "256" not in default:
        return "large"
    return value


FLOATS = {"eps", "qk_scale", "mask_min", "cap_l2", "eps_qk", "res_scale"}
FP32_PTRS = {"PM", "PL", "PACC"}
INT_PTRS = {"LENS", "SEM"}
INT64_PTRS = {"COUNTER"}
# pointer parameters named without a _ptr suffix, per kernel module (elsewhere M, N, K are sizes)
PTR_NAMES = {
    "attention": {"Q", "K", "V", "O", "M", "LENS", "PM", "PL", "PACC", "SEM", "KN", "VN", "COS", "SIN", "QW", "KW"},
    "gemv": {"QO", "KC", "VC", "COS", "SIN", "COUNTER", "QW", "KW"},
    "greedy": {"LOGITS"},
    "prologue": {"CUR", "POS_OFF", "KEY_VALID", "MASK", "WMASK", "POS", "TOK", "EMB", "EMB_OUT", "COS", "SIN", "COS_OUT",
                 "SIN_OUT"},
    "rope_cache": {"Q", "K", "V", "QO", "KC", "VC", "COS", "SIN", "COUNTER", "QW", "KW"},
    "rope": {"Q", "K", "QO", "KO", "COS", "SIN", "QW", "KW"},
}


# pointer parameters of another dtype than the activations, per kernel module
PTR_DTYPES = {
    "gemv": {"ws_ptr": torch.float32, "sem_ptr": torch.int32},
    "greedy": {"WS_V": torch.float32, "WS_I": torch.int32, "SEM": torch.int32, "UNFINISHED": torch.bool,
               "N_GEN": torch.int64, "OUT": torch.int64, "CUR": torch.int64, "PAD": torch.int64, "EOS": torch.int64,
               "TOK": torch.int64},
    "prologue": {"CUR": torch.int64, "POS_OFF": torch.int64, "POS": torch.int64, "TOK": torch.int64,
                 "KEY_VALID": torch.bool, "MASK": torch.bool, "WMASK": torch.bool},
    "moe": {"ids_ptr": torch.int64, "rows_ptr": torch.int32, "bexp_ptr": torch.int32, "wts_ptr": torch.float32,
            "vals_ptr": torch.float32, "p_ptr": torch.float32, "y_ptr": torch.float32, "ws_ptr": torch.float32,
            "sem_ptr": torch.int32, "cur_ptr": torch.int32},
}


def launch_options(fn) -> dict:
    """The options every launch of fn takes (its module's LAUNCH_OPTIONS), so a case compiles as
    the kernel runs."""
    return dict(getattr(sys.modules[fn.fn.__module__], "LAUNCH_OPTIONS", {}))


def mock_args(fn, act, constexprs):
    module = fn.fn.__module__.rsplit(".", 1)[-1]
    ptr_names = PTR_NAMES.get(module, set())
    dtypes = PTR_DTYPES.get(module, {})
    args = []
    for p in fn.params:
        if p.is_constexpr:
            # a constexpr with a default (rmsnorm's ROUND_NORMED) takes it unless the case names it
            args.append(constexprs[p.name] if p.name in constexprs or not p.has_default else p.default)
        elif p.name in constexprs:  # a case's own dtype for a pointer (Gemma's fp32 norm weights)
            args.append(constexprs[p.name])
        elif p.name in dtypes:
            args.append(dtypes[p.name])
        elif p.name.endswith("_ptr") or p.name in ptr_names:
            args.append(torch.float32 if p.name in FP32_PTRS else torch.int32 if p.name in INT_PTRS
                        else torch.int64 if p.name in INT64_PTRS else act)
        elif p.name == "stride_wn" and module in ("gemv", "moe"):
            # the packed K-major weight's unit stride, which the launch specializes; an N-major
            # case names stride_wk=1 instead
            args.append(64 if constexprs.get("stride_wk") == 1 else 1)
        elif p.name in FLOATS:
            args.append(0.125)
        else:
            args.append(64)  # sizes and strides: 16-divisible, as real ones mostly are
    return args


DESC_PATHS = (True, False)


def _desc(shape, block):
    """A host-side tensor descriptor over a small bf16 CPU tensor: what a kernel's descriptor
    argument specializes on (dtype and box) is all the compile needs."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(torch.empty(shape, dtype=torch.bfloat16), list(block))


def cases(cuda: bool = False):
    """(name, kernel, configs, activation dtype, constexprs) of every case; cuda: with the cases
    only CUDA launches, and the GEMM at CUDA's configs (scripts/cuda_compile_check.py)."""
    import importlib

    from xpuinject_kernels import _backend, attention, gemv, greedy, moe, prologue, rmsnorm, rope, rope_cache

    gemm = importlib.import_module("xpuinject_kernels.gemm")  # the package exports gemm() itself

    bf16 = torch.bfloat16
    yield ("rmsnorm", rmsnorm._rms_norm_kernel, [({}, 8, 1)], bf16,
           dict(HAS_RESIDUAL=False, BLOCK=2048, SINGLE=True, ROUND_NORMED=True))
    yield ("add-rmsnorm", rmsnorm._rms_norm_kernel, [({}, 8, 1)], bf16,
           dict(HAS_RESIDUAL=True, BLOCK=4096, SINGLE=True, ROUND_NORMED=True))
    yield ("rmsnorm gemma", rmsnorm._rms_norm_kernel, [({}, 8, 1)], bf16,
           dict(HAS_RESIDUAL=False, BLOCK=2048, SINGLE=True, ROUND_NORMED=False))
    # OLMo 2's norm then the block's residual add, one pass and the two-pass loop of a wide row
    yield ("rmsnorm-add", rmsnorm._rms_norm_kernel, [({}, 8, 1)], bf16,
           dict(HAS_RESIDUAL=False, BLOCK=4096, SINGLE=True, ROUND_NORMED=False, ADD_AFTER=True))
    yield ("rmsnorm-add wide", rmsnorm._rms_norm_kernel, [({}, 8, 1)], bf16,
           dict(HAS_RESIDUAL=False, BLOCK=8192, SINGLE=False, ROUND_NORMED=False, ADD_AFTER=True))
    # EXAONE 4's and GLM-4's norm and add: Llama's rounding before the weight
    yield ("rmsnorm-add llama", rmsnorm._rms_norm_kernel, [({}, 8, 1)], bf16,
           dict(HAS_RESIDUAL=False, BLOCK=4096, SINGLE=True, ROUND_NORMED=True, ADD_AFTER=True))
    yield "rope", rope._rope_kernel, [({}, 4, 1)], bf16, dict(BLOCK_HQ=32, BLOCK_HK=8, BLOCK_HALF=32, BLOCK_PASS=0)
    yield ("rope + cache write", rope_cache._rope_cache_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=0))
    # partial rotary (Phi-4-mini: 96 of 128 channels rotate, 32 are copied)
    yield ("rope partial rotary", rope._rope_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK_HQ=32, BLOCK_HK=8, BLOCK_HALF=64, BLOCK_PASS=32))
    yield ("rope + cache write partial rotary", rope_cache._rope_cache_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=32))
    # SmolLM3's NoPE layers: nothing rotates (one masked lane), every channel is copied or cached
    yield ("rope NoPE", rope._rope_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK_HQ=32, BLOCK_HK=8, BLOCK_HALF=1, BLOCK_PASS=128))
    yield ("rope + cache write NoPE", rope_cache._rope_cache_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=1, BLOCK_D=128, BLOCK_PASS=128))
    # qwen3's q/k RMSNorm fused in, at the warps rms_norm launches a head_dim row with (Llama's order)
    nw = rmsnorm.num_warps(128)
    yield ("rope + cache write + q/k norm", rope_cache._rope_cache_kernel, [({}, nw, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=0, NORM=True, NORM_ROUND=True))
    yield ("rope + cache write + q/k norm partial rotary", rope_cache._rope_cache_kernel, [({}, nw, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=32, NORM=True, NORM_ROUND=True))
    # HunYuan's q/k norms on the rotated heads, after RoPE
    yield ("rope + cache write + q/k norm after rope", rope_cache._rope_cache_kernel, [({}, nw, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=0, NORM=True, NORM_ROUND=True, NORM_AFTER=True))
    yield ("rope + cache write + q/k norm after rope partial rotary", rope_cache._rope_cache_kernel, [({}, nw, 1)],
           bf16, dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=32, NORM=True, NORM_ROUND=True,
                      NORM_AFTER=True))
    # the prefill's RoPE with the q/k norms (no cache), before and after the rotation
    for after in (False, True):
        yield (f"rope + q/k norm{' after rope' if after else ''}", rope._rope_norm_kernel, [({}, nw, 1)], bf16,
               dict(BLOCK_H=8, BLOCK_HALF=64, BLOCK_D=128, BLOCK_PASS=0, NORM_ROUND=True, NORM_AFTER=after))
    gcfgs = [(c.kwargs, c.num_warps, c.num_stages) for c in _backend.gemm_configs("cuda" if cuda else "xpu")]
    # gemm() takes the descriptor path only where this Triton has tl.make_tensor_descriptor
    # (_backend.has_descriptors); elsewhere only block pointers are ever compiled.
    for epi in ("none", "bias", "swiglu", "geglu", "geglu_erf", "hardswish", "residual"):
        for desc in DESC_PATHS:
            yield (f"gemm {epi} {'desc' if desc else 'blockptr'}", gemm._gemm_kernel, gcfgs, bf16,
                   dict(HAS_BIAS=epi == "bias", EPILOGUE=gemm._EPI_CODE[epi], USE_DESC=desc, W_KMAJOR=True))
    yield ("gemm none weight.t() blockptr", gemm._gemm_kernel, gcfgs, bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, USE_DESC=False, W_KMAJOR=False))
    # an N-major weight through descriptors of its [N, K] rows: gemm() takes this path on CUDA only
    # (the XPU backend does not lower a transposed descriptor tile)
    for epi in ("none", "swiglu") if cuda else ():
        yield (f"gemm {epi} weight.t() desc", gemm._gemm_kernel, gcfgs, bf16,
               dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], USE_DESC=True, W_KMAJOR=False))
    pcfgs = [(c.kwargs, c.num_warps, c.num_stages) for c in attention._prefill_configs("xpu")]
    dcfgs = [(c.kwargs, c.num_warps, c.num_stages) for c in attention._decode_configs("xpu")]
    for hd in (64, 128):
        for mask_kind in (0, 1, 2):
            yield (f"attention prefill d{hd} mask{mask_kind}", attention._prefill_kernel, pcfgs, bf16,
                   dict(HEAD_DIM=hd, BLOCK_D=hd, IS_CAUSAL=mask_kind == 0, MASK_KIND=mask_kind, MASK_ADD=False,
                        DOT_PREC="tf32", UPCAST=False, SOFTCAP=False, SLIDING=False))
        yield (f"attention decode d{hd}", attention._decode_split_kernel, dcfgs, bf16,
               dict(HEAD_DIM=hd, BLOCK_D=hd, BLOCK_G=16, HAS_LENS=True, MASK_KIND=0, MASK_ADD=False, DOT_PREC="tf32",
                    UPCAST=False, SINGLE=False, SOFTCAP=False, SLIDING=False, ADVANCE=False))
    # Gemma 2's soft-capped, sliding layers (head_dim 256 as published, 128 as a smaller shape):
    # the tanh cap and the window bounds, causal and with a 4-D mask, split and single-pass decode.
    for hd in (128, 256):
        for mask_kind in (0, 2):
            yield (f"attention prefill d{hd} mask{mask_kind} softcap sliding", attention._prefill_kernel, pcfgs, bf16,
                   dict(HEAD_DIM=hd, BLOCK_D=hd, IS_CAUSAL=mask_kind == 0, MASK_KIND=mask_kind, MASK_ADD=True,
                        DOT_PREC="tf32", UPCAST=False, SOFTCAP=True, SLIDING=True))
        for single in (False, True):
            yield (f"attention decode d{hd} softcap sliding single={single}", attention._decode_split_kernel, dcfgs,
                   bf16, dict(HEAD_DIM=hd, BLOCK_D=hd, BLOCK_G=16, HAS_LENS=True, MASK_KIND=1, MASK_ADD=True,
                              DOT_PREC="tf32", UPCAST=False, SINGLE=single, SOFTCAP=True, SLIDING=True,
                              ADVANCE=False))
    # Gemma 3 (head_dim 256, no cap, sliding or full)
    yield ("attention prefill d256 mask0", attention._prefill_kernel, pcfgs, bf16,
           dict(HEAD_DIM=256, BLOCK_D=256, IS_CAUSAL=True, MASK_KIND=0, MASK_ADD=False, DOT_PREC="tf32", UPCAST=False,
                SOFTCAP=False, SLIDING=False))
    yield ("attention decode d256", attention._decode_split_kernel, dcfgs, bf16,
           dict(HEAD_DIM=256, BLOCK_D=256, BLOCK_G=16, HAS_LENS=True, MASK_KIND=0, MASK_ADD=False, DOT_PREC="tf32",
                UPCAST=False, SINGLE=False, SOFTCAP=False, SLIDING=True, ADVANCE=False))
    yield "attention decode reduce d256", attention._decode_reduce_kernel, [({}, 4, 1), ({}, 1, 1)], bf16, dict(
        HEAD_DIM=256, BLOCK_D=256, BLOCK_S=16, ADVANCE=False)
    yield ("rope + cache write d256", rope_cache._rope_cache_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=128, BLOCK_D=256, BLOCK_PASS=0))
    # Gemma 3's q/k norms fused in: its order (no rounding before the weight), the fp32 1 + w
    yield ("rope + cache write d256 + gemma q/k norm", rope_cache._rope_cache_kernel,
           [({}, rmsnorm.num_warps(256), 1)], bf16,
           dict(BLOCK_H=8, BLOCK_HALF=128, BLOCK_D=256, BLOCK_PASS=0, NORM=True, NORM_ROUND=False,
                QW=torch.float32, KW=torch.float32))
    yield ("attention decode reduce", attention._decode_reduce_kernel, [({}, 4, 1), ({}, 1, 1)], bf16,
           dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_S=16, ADVANCE=False))
    # a static cache's decode step: the reduce (or, with one split, the grid's last program)
    # advances the layer's counter
    yield ("attention decode reduce advancing the counter", attention._decode_reduce_kernel,
           [({}, 4, 1), ({}, 1, 1)], bf16, dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_S=16, ADVANCE=True))
    for single in (False, True):
        yield (f"attention decode advance single={single}", attention._decode_split_kernel, dcfgs, bf16,
               dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_G=16, HAS_LENS=True, MASK_KIND=1, MASK_ADD=False, DOT_PREC="tf32",
                    UPCAST=False, SINGLE=single, SOFTCAP=False, SLIDING=False, ADVANCE=True))
    # decode-sized GEMMs: split-K with the reduce in the last program, and without a split
    for epi in ("none", "swiglu", "geglu", "geglu_erf", "residual"):
        for split in (1, 4):
            yield (f"gemv {epi} split{split}", gemv._gemv_kernel, [({}, 4, 2)], bf16,
                   dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], BLOCK_M=16, BLOCK_N=64, BLOCK_K=128,
                        SPLIT_K=split))
    yield ("gemv swiglu split2, add + RMSNorm prologue", gemv._gemv_kernel, [({}, 4, 2)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=1, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=2, NORM=True))
    # a decoder layer's input RMSNorm inside the QKV GEMV (rstd on the accumulator)
    for split in (1, 4):
        yield (f"gemv none split{split}, input RMSNorm", gemv._gemv_kernel, [({}, 4, 2)], bf16,
               dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, SPLIT_K=split, ROW_NORM=True,
                    ROWS=1, BLOCK_R=2048))
    # a decode step's QKV GEMV writing the rotated query and the static cache (one head a tile):
    # qwen3's q/k norms at head_dim 128, none at 64, Gemma's on the fp32 1 + w at head_dim 256
    for hd, bk, split, norm, rnd, w in ((128, 64, 8, True, True, bf16), (64, 128, 1, False, True, bf16),
                                        (256, 64, 4, True, False, torch.float32)):
        yield (f"gemv none split{split}, RoPE + cache write d{hd} norm={norm}{'' if rnd else ' gemma'}",
               gemv._gemv_kernel, [({}, 4, 3)], bf16,
               dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=hd, BLOCK_K=bk, SPLIT_K=split, ROPE=True,
                    NORM_QK=norm, NORM_ROUND=rnd, QW=w, KW=w))
    # HunYuan's q/k norms after the rotation, a head a tile and (EW) eight tiles a head
    yield ("gemv none split8, RoPE + cache write d128 norm after rope", gemv._gemv_kernel, [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, SPLIT_K=8, ROPE=True,
                NORM_QK=True, NORM_ROUND=True, NORM_AFTER=True))
    yield ("gemv N-major EW none split1, RoPE + cache write d128 norm after rope, 8 tiles a head", gemv._gemv_kernel,
           [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=1, BLOCK_N=16, BLOCK_K=256, SPLIT_K=1, ROPE=True, NORM_QK=True,
                NORM_ROUND=True, NORM_AFTER=True, stride_wk=1, EW=True, EW_STAGES=3, HEAD_TILES=8, BLOCK_D=128))
    # with the layer's input RMSNorm in its prologue too (where launches do not overlap)
    yield ("gemv none split8, input RMSNorm, RoPE + cache write d128 norm=True", gemv._gemv_kernel, [({}, 4, 3)],
           bf16, dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, SPLIT_K=8, ROW_NORM=True, ROWS=1,
                      BLOCK_R=2048, ROPE=True, NORM_QK=True, NORM_ROUND=True))
    if cuda:
        # the weight tiles through a host-side tensor descriptor (TMA), a CUDA switch
        for epi, split in (("none", 4), ("swiglu", 2), ("residual", 1)):
            yield (f"gemv {epi} split{split}, weight tiles through a descriptor", gemv._gemv_kernel, [({}, 4, 4)],
                   bf16, dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], BLOCK_M=16, BLOCK_N=128, BLOCK_K=64,
                              SPLIT_K=split, TMA=True, w_desc=_desc((256, 512), (64, 128))))
        yield ("gemv none split8, RoPE + cache write d128 norm=True, weight tiles through a descriptor",
               gemv._gemv_kernel, [({}, 4, 3)], bf16,
               dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, SPLIT_K=8, ROPE=True,
                    NORM_QK=True, NORM_ROUND=True, TMA=True, w_desc=_desc((256, 512), (64, 128))))
    # the weight tiles through block pointers (XPU's 2D block loads, the default there)
    for epi, split in (("none", 4), ("swiglu", 2), ("residual", 1)):
        yield (f"gemv {epi} split{split}, weight tiles through block pointers", gemv._gemv_kernel, [({}, 4, 3)],
               bf16, dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], BLOCK_M=16, BLOCK_N=128, BLOCK_K=64,
                          SPLIT_K=split, BLOCK_PTR=True))
    yield ("gemv none split8, RoPE + cache write d128 norm=True, weight tiles through block pointers",
           gemv._gemv_kernel, [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, SPLIT_K=8, ROPE=True,
                NORM_QK=True, NORM_ROUND=True, BLOCK_PTR=True))
    # the same on N-major weights ([N, K] rows of contiguous K, read as [BLOCK_N, BLOCK_K] tiles)
    for epi, bn, bk, split in (("none", 16, 256, 1), ("swiglu", 16, 256, 4)):
        yield (f"gemv N-major {epi} split{split}", gemv._gemv_kernel, [({}, 4, 3)], bf16,
               dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split,
                    stride_wk=1))
    yield ("gemv N-major none split8, RoPE + cache write d128 norm=True", gemv._gemv_kernel, [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, SPLIT_K=8, ROPE=True, NORM_QK=True,
                NORM_ROUND=True, stride_wk=1))
    # one row on N-major weights: the CUDA cores' multiply-add (EW)
    for epi, bn, bk, split in (("none", 16, 256, 1), ("swiglu", 16, 256, 2), ("residual", 16, 256, 2)):
        yield (f"gemv N-major EW {epi} split{split}", gemv._gemv_kernel, [({}, 4, 3)], bf16,
               dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], BLOCK_M=1, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split,
                    stride_wk=1, EW=True, EW_STAGES=3))
    yield ("gemv N-major EW none split4, RoPE + cache write d128 norm=True", gemv._gemv_kernel, [({}, 8, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=1, BLOCK_N=128, BLOCK_K=64, SPLIT_K=4, ROPE=True, NORM_QK=True,
                NORM_ROUND=True, stride_wk=1, EW=True, EW_STAGES=3))
    yield ("gemv N-major EW none split1, RoPE + cache write d128 norm=True, 8 tiles a head", gemv._gemv_kernel,
           [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=1, BLOCK_N=16, BLOCK_K=256, SPLIT_K=1, ROPE=True, NORM_QK=True,
                NORM_ROUND=True, stride_wk=1, EW=True, EW_STAGES=3, HEAD_TILES=8, BLOCK_D=128))
    yield ("gemv N-major EW none split2, input RMSNorm", gemv._gemv_kernel, [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=1, BLOCK_N=16, BLOCK_K=256, SPLIT_K=2, ROW_NORM=True, ROWS=1,
                BLOCK_R=2048, stride_wk=1, EW=True, EW_STAGES=3))
    # one row on K-major weights through EW (the config's switch), a head a tile and narrower
    for epi, bn, bk, split in (("none", 128, 32, 2), ("swiglu", 128, 32, 2)):
        yield (f"gemv K-major EW {epi} split{split}", gemv._gemv_kernel, [({}, 4, 3)], bf16,
               dict(HAS_BIAS=False, EPILOGUE=gemm._EPI_CODE[epi], BLOCK_M=1, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split,
                    EW=True, EW_STAGES=3))
    yield ("gemv K-major EW none split8, RoPE + cache write d128 norm=True", gemv._gemv_kernel, [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=1, BLOCK_N=128, BLOCK_K=32, SPLIT_K=8, ROPE=True, NORM_QK=True,
                NORM_ROUND=True, EW=True, EW_STAGES=3))
    yield ("gemv K-major EW none split4, RoPE + cache write d128 norm=True, 2 tiles a head", gemv._gemv_kernel,
           [({}, 4, 3)], bf16,
           dict(HAS_BIAS=False, EPILOGUE=0, BLOCK_M=1, BLOCK_N=64, BLOCK_K=64, SPLIT_K=4, ROPE=True, NORM_QK=True,
                NORM_ROUND=True, EW=True, EW_STAGES=3, HEAD_TILES=2, BLOCK_D=128))
    yield "greedy selection", greedy._greedy_kernel, [({}, 8, 1)], bf16, dict(CHUNKS=32, BLOCK=4096, BLOCK_C=32, BLOCK_E=4)
    # a decode step's inputs: bool masks (full and sliding), then an additive bf16 mask
    yield ("step prologue", prologue._prologue_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK=prologue.BLOCK, ADDITIVE=False, HAS_WINDOW=True, HAS_EMB=True, HAS_ROPE=True, PDL=False))
    yield ("step prologue additive", prologue._prologue_kernel, [({}, 4, 1)], bf16,
           dict(BLOCK=prologue.BLOCK, ADDITIVE=True, HAS_WINDOW=False, HAS_EMB=True, HAS_ROPE=True, PDL=False,
                MASK=bf16, WMASK=bf16))
    # mixture of experts: routing, the decode GEMVs (with and without K splits), the grouped
    # prefill GEMMs at the heuristic's row tiles
    for bt, split in ((16, 8), (64, 1)):  # decode splits the hidden size, prefill does not
        yield (f"moe router t{bt} split{split}", moe._router_kernel, [({}, 4, 2)], bf16,
               dict(BLOCK_T=bt, BLOCK_K=128, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=split))
    yield ("moe router t16 split8 with its top-8", moe._router_kernel, [({}, 4, 2)], bf16,
           dict(BLOCK_T=16, BLOCK_K=128, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=8, TOP_K=8))
    yield ("moe router t16 split8 with its top-8 of one token", moe._router_kernel, [({}, 4, 2), ({}, 1, 3)], bf16,
           dict(BLOCK_T=16, BLOCK_K=128, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=8, TOP_K=8, ROWS_T=1))
    yield ("moe router t16 split8 with its top-8 of one token, the add + RMSNorm in it", moe._router_kernel,
           [({}, 4, 2), ({}, 1, 3)], bf16,
           dict(BLOCK_T=16, BLOCK_K=256, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=8, TOP_K=8, ROWS_T=1, NORM=True,
                BLOCK_H=2048))
    yield ("moe router t16 split8 with its top-8 of one token, weights before the wait, sorted top-k",
           moe._router_kernel, [({}, 1, 3)], bf16,
           dict(BLOCK_T=16, BLOCK_K=256, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=8, TOP_K=8, TOPK_P2=8, ROWS_T=1,
                W_EARLY=True, SORT_TOPK=True))
    yield ("moe router t16 split8 with its top-8 of one token, the add + RMSNorm in it, weights before the wait, "
           "sorted top-k", moe._router_kernel, [({}, 1, 3)], bf16,
           dict(BLOCK_T=16, BLOCK_K=256, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=8, TOP_K=8, ROWS_T=1, NORM=True,
                BLOCK_H=2048, W_EARLY=True, SORT_TOPK=True))
    yield ("moe router t16 split8 with its top-3 of 8 tokens, sorted top-k, renormalized weights",
           moe._router_kernel, [({}, 4, 2)], bf16,
           dict(BLOCK_T=16, BLOCK_K=256, BLOCK_E=16, BLOCK_ALL=16, SPLIT_K=8, TOP_K=3, TOPK_P2=4, ROWS_T=8,
                W_EARLY=True, SORT_TOPK=True, RULE=1))
    yield ("moe router t16 split1 with its top-8 and renormalized weights", moe._router_kernel, [({}, 4, 2)], bf16,
           dict(BLOCK_T=16, BLOCK_K=128, BLOCK_E=16, BLOCK_ALL=128, SPLIT_K=1, TOP_K=8, RULE=1, TOPK_P2=8))
    # the experts' weights as packed, K-major (mock_args: stride_wn 1), and N-major (stride_wk 1:
    # each expert nn.Linear's own layout, read through the same kernels)
    nm = dict(stride_wk=1)
    yield ("moe decode down split4 + residual", moe._decode_down_kernel, [({}, 4, 2)], bf16,
           dict(TOP_K=8, RULE=1, BLOCK_N=64, BLOCK_K=128, SPLIT_K=4, HAS_RES=True))
    yield ("moe top-k sum k8 + residual", moe._topk_sum_kernel, [({}, 4, 1)], bf16,
           dict(TOP_K=8, BLOCK_H=1024, HAS_RES=True))
    for split in (1, 4):
        yield (f"moe decode gate/up split{split}", moe._decode_gate_up_kernel, [({}, 4, 2)], bf16,
               dict(BLOCK_N=64, BLOCK_K=128, SPLIT_K=split))
        yield (f"moe decode down split{split}", moe._decode_down_kernel, [({}, 4, 2)], bf16,
               dict(TOP_K=8, RULE=1, BLOCK_N=64, BLOCK_K=128, SPLIT_K=split))
        # the CUDA cores' multiply-add (EW), its loads pipelined as deep as the launch's stages
        yield (f"moe decode gate/up EW split{split}", moe._decode_gate_up_kernel, [({}, 4, 2)], bf16,
               dict(BLOCK_N=128, BLOCK_K=32, SPLIT_K=split, EW=True, EW_STAGES=2))
        yield (f"moe decode down EW split{split} + residual", moe._decode_down_kernel, [({}, 4, 2)], bf16,
               dict(TOP_K=8, RULE=1, BLOCK_N=128, BLOCK_K=32, SPLIT_K=split, HAS_RES=True, EW=True, EW_STAGES=2))
    for ew, bn, bk in ((False, 64, 128), (True, 16, 256)):
        tag = " EW" if ew else ""
        yield (f"moe decode gate/up N-major{tag} split2", moe._decode_gate_up_kernel, [({}, 4, 2)], bf16,
               dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=2, EW=ew, EW_STAGES=2 if ew else None, **nm))
        yield (f"moe decode down N-major{tag} split2 + residual", moe._decode_down_kernel, [({}, 4, 2)], bf16,
               dict(TOP_K=8, RULE=1, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=2, HAS_RES=True, EW=ew,
                    EW_STAGES=2 if ew else None, **nm))
    # the decode launches' weight tiles through block pointers (XPU's 2D block loads, the default there)
    for split in (1, 2):
        yield (f"moe decode gate/up split{split}, weight tiles through block pointers", moe._decode_gate_up_kernel,
               [({}, 4, 3)], bf16, dict(BLOCK_N=128, BLOCK_K=64, SPLIT_K=split, BLOCK_PTR=True))
        yield (f"moe decode down split{split} + residual, weight tiles through block pointers",
               moe._decode_down_kernel, [({}, 4, 3)], bf16,
               dict(TOP_K=8, RULE=1, BLOCK_N=128, BLOCK_K=64, SPLIT_K=split, HAS_RES=True, BLOCK_PTR=True))
    if cuda:
        # the decode launches' weight tiles through host-side tensor descriptors (TMA), a CUDA switch
        for split in (1, 2):
            yield (f"moe decode gate/up split{split}, weight tiles through a descriptor", moe._decode_gate_up_kernel,
                   [({}, 4, 4)], bf16, dict(BLOCK_N=128, BLOCK_K=64, SPLIT_K=split, TMA=True,
                                            w_desc=_desc((4, 256, 512), (1, 64, 128))))
            yield (f"moe decode down split{split} + residual, weight tiles through a descriptor",
                   moe._decode_down_kernel, [({}, 4, 4)], bf16,
                   dict(TOP_K=8, RULE=1, BLOCK_N=128, BLOCK_K=64, SPLIT_K=split, HAS_RES=True, TMA=True,
                        w_desc=_desc((4, 256, 512), (1, 64, 128))))
    # the experts blocked (moe.blocked: tiles of 128 columns, each a contiguous run), at the H200's
    # one-token decode config and at tiles narrower than the slabs (EW)
    bl = dict(stride_wt=128 * 2048, SLAB=128)
    yield ("moe decode gate/up blocked split2", moe._decode_gate_up_kernel, [({}, 4, 4)], bf16,
           dict(BLOCK_N=128, BLOCK_K=64, SPLIT_K=2, **bl))
    yield ("moe decode down blocked split2 + residual", moe._decode_down_kernel, [({}, 4, 4)], bf16,
           dict(TOP_K=8, RULE=1, BLOCK_N=128, BLOCK_K=64, SPLIT_K=2, HAS_RES=True, **bl))
    yield ("moe decode gate/up blocked EW split2", moe._decode_gate_up_kernel, [({}, 4, 2)], bf16,
           dict(BLOCK_N=64, BLOCK_K=64, SPLIT_K=2, EW=True, EW_STAGES=2, **bl))
    yield ("moe decode down blocked EW split1 + residual", moe._decode_down_kernel, [({}, 4, 2)], bf16,
           dict(TOP_K=8, RULE=1, BLOCK_N=64, BLOCK_K=64, SPLIT_K=1, HAS_RES=True, EW=True, EW_STAGES=2, **bl))
    # the down launch with all of a token's slots in each program (DOWN_ALL), dot and EW, K-major and N-major
    yield ("moe decode down all slots + residual", moe._decode_down_kernel, [({}, 4, 4)], bf16,
           dict(TOP_K=8, RULE=1, BLOCK_N=64, BLOCK_K=128, SPLIT_K=1, HAS_RES=True, ALL_SLOTS=True))
    yield ("moe decode down all slots EW N-major + residual", moe._decode_down_kernel, [({}, 4, 3)], bf16,
           dict(TOP_K=8, RULE=0, BLOCK_N=16, BLOCK_K=256, SPLIT_K=1, HAS_RES=True, ALL_SLOTS=True, EW=True,
                EW_STAGES=3, **nm))
    yield ("moe grouped gate/up blocked m64", moe._grouped_gate_up_kernel, [({}, 8, 2)], bf16,
           dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_B=moe.GROUP_BLOCKS, **bl))
    yield ("moe grouped down blocked m64", moe._grouped_down_kernel, [({}, 8, 2)], bf16,
           dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_B=moe.GROUP_BLOCKS, **bl))
    for bm, warps in ((16, 4), (64, 8), (128, 8)):
        yield (f"moe grouped gate/up m{bm}", moe._grouped_gate_up_kernel, [({}, warps, 2)], bf16,
               dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_B=moe.GROUP_BLOCKS))
        yield (f"moe grouped down m{bm}", moe._grouped_down_kernel, [({}, warps, 2)], bf16,
               dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_B=moe.GROUP_BLOCKS))
        yield (f"moe grouped gate/up N-major m{bm}", moe._grouped_gate_up_kernel, [({}, warps, 2)], bf16,
               dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_B=moe.GROUP_BLOCKS, **nm))
        yield (f"moe grouped down N-major m{bm}", moe._grouped_down_kernel, [({}, warps, 2)], bf16,
               dict(BLOCK_M=bm, BLOCK_N=128, BLOCK_K=64, GROUP_B=moe.GROUP_BLOCKS, **nm))
        yield (f"moe layout place m{bm}", moe._layout_place_kernel, [({}, 4, 1)], bf16,
               dict(BLOCK_M=bm, BLOCK_P=moe._LAYOUT_BLOCK))
    # the prefill layout's counts (Qwen3-MoE's 128 experts, and 8 as Mixtral's) and the top-k sum
    for e in (8, 128):
        be = _backend.next_pow2(e + 1)
        yield (f"moe layout count e{e}", moe._layout_count_kernel, [({}, 4, 1)], bf16,
               dict(BLOCK_M=64, BLOCK_P=moe._LAYOUT_BLOCK, BLOCK_E=be, BLOCK_B=max(1, 8192 // be)))
    for k in (2, 8):
        yield (f"moe top-k sum k{k}", moe._topk_sum_kernel, [({}, 4, 1)], bf16, dict(TOP_K=k, BLOCK_H=1024))

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warp-size", type=int, default=16, help="XPU subgroup size (16 on PVC)")
    ap.add_argument("--only", default="", metavar="PREFIX",
                    help="compile only the cases whose name starts with PREFIX (e.g. 'moe')")
    a = ap.parse_args()
    triton.runtime.driver.set_active(TargetDriver(GPUTarget("xpu", PVC, a.warp_size)))
    print(f"triton {triton.__version__} ({Path(triton.__file__).parent}), target xpu {PVC['name']}, subgroup {a.warp_size}")
    from xpuinject_kernels import _backend

    global DESC_PATHS
    if not _backend.has_descriptors():
        import triton.language as tl

        DESC_PATHS = (False,)
        print("this Triton has no tl.make_tensor_descriptor (Triton < 3.4): gemm() takes the block-pointer path "
              "here, so only that path is compiled; the name is aliased to the experimental one only so this "
              "Triton's source hasher resolves the (never compiled) descriptor branch")
        tl.make_tensor_descriptor = tl._experimental_make_tensor_descriptor
    ok = failed = 0
    for name, fn, cfgs, act, consts in cases():
        if not name.startswith(a.only):
            continue
        for kw, warps, stages in cfgs:
            kw = dict(kw)
            grf = kw.pop("grf_mode", None)
            opts = dict(launch_options(fn), num_warps=warps, num_stages=stages)
            if grf is not None:
                opts["grf_mode"] = grf_option(grf)
            label = f"{name} {kw} warps={warps} stages={stages}" + (f" grf={grf}" if grf else "")
            try:
                k = fn.warmup(*mock_args(fn, act, {**consts, **kw}), grid=(1,), **opts)
                spv = k.asm.get("spv", b"")
                blocks = block_reads(k.asm.get("llir", ""))
                print(f"ok    {label}: {len(spv)} bytes of SPIR-V, build flags {k.metadata.build_flags!r}"
                      + (f", {blocks} 2D block reads" if blocks else ""))
                ok += 1
            except Exception as e:  # report every failure, keep going
                failed += 1
                msg = [ln for ln in "".join(traceback.format_exception_only(type(e), e)).strip().splitlines() if ln.strip()]
                cause = e.__cause__ or e.__context__
                why = f"{type(cause).__name__}: {cause}" if cause is not None else msg[-1]
                print(f"FAIL  {label}: {why.splitlines()[0] if why else msg[-1]}")
    print(f"{ok} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
