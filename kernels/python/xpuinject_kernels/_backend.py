"""Backend detection, alignment checks and autotune config builders shared by every kernel.

Only stdlib, torch and triton are imported here (the package is copied verbatim into kernel-hub
variant folders by inject/emit/emit.go).

Backends:
  "cuda"  NVIDIA (Hopper-sized configs, TMA tensor descriptors need `ensure_allocator()`),
  "xpu"   Intel GPUs through the Intel XPU backend for Triton (configs after the huggingface/kernels
          xpu-kernels skill, https://github.com/huggingface/kernels, skills/xpu-kernels: grf_mode
          "256", GROUP_SIZE_M swizzling, register-file-aware pruning),
  "cpu"   the Triton interpreter; kernels run on CPU tensors only when TRITON_INTERPRET=1.

Under the interpreter every autotuned kernel gets ONE small config: the interpreter executes each
program in numpy, so benchmarking several configs would multiply an already slow run.
"""

from __future__ import annotations

import collections
import os
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch
import triton
import triton.language as tl

__all__ = [
    "backend",
    "is_interpret",
    "require_runnable",
    "tma_ok",
    "tma_box_ok",
    "weight_desc",
    "weight_tma",
    "weight_block_ptr",
    "ensure_allocator",
    "empty",
    "set_poison",
    "launch_config",
    "poison_enabled",
    "launch_counts",
    "pdl",
    "pdl_kw",
    "pdl_wait",
    "count",
    "autotuned",
    "gemm_configs",
    "rowwise_num_warps",
    "XPU_GRF_BYTES_PER_THREAD",
    "CUDA_SMEM_BYTES",
]

# Every launch increments a named counter here (e.g. "gemm.tma", "gemm.blockptr", "rms_norm").
# Tests assert which code path ran; layers' tests assert the kernel actually ran.
launch_counts: "collections.Counter[str]" = collections.Counter()


def count(name: str) -> None:
    launch_counts[name] += 1


_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def env_switch(name: str) -> Optional[bool]:
    """An environment switch: 1/true/on/yes True, 0/false/off/no False (any case), unset or empty
    None; any other value is an error naming the variable, not a silent default."""
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    if v.lower() in _ON:
        return True
    if v.lower() in _OFF:
        return False
    raise ValueError(f"xpuinject_kernels: environment variable {name}={v!r}: want 1 or 0 (on or off)")


# When poisoning is on, launchers allocate outputs filled with NaN so an element the kernel fails
# to write shows up as NaN in the comparison. Tests turn it on; production leaves it off (cost:
# one extra fill per output).
_POISON = env_switch("XPUINJECT_POISON") is True


def set_poison(on: bool) -> bool:
    """Turn poisoning on or off; returns the previous setting (to restore it)."""
    global _POISON
    prev, _POISON = _POISON, bool(on)
    return prev


def poison_enabled() -> bool:
    return _POISON


def empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.empty, or a NaN-filled tensor when poisoning is enabled."""
    t = torch.empty(tuple(shape), dtype=dtype, device=device)
    if _POISON:
        t.fill_(float("nan"))
    return t


def empty_like(t: torch.Tensor) -> torch.Tensor:
    """torch.empty_like (same dimension order as t: a transposed view gets a transposed result,
    so a kernel writes it in the order it reads t), NaN-filled when poisoning is enabled."""
    o = torch.empty_like(t, memory_format=torch.preserve_format)
    if _POISON:
        o.fill_(float("nan"))
    return o


def is_interpret() -> bool:
    """True when TRITON_INTERPRET is set (read the way triton itself reads it)."""
    try:
        return bool(triton.knobs.runtime.interpret)
    except AttributeError:  # older triton without knobs
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def backend(device) -> str:
    """Return "cuda", "xpu" or "cpu" for a torch device (or tensor, or device string)."""
    if isinstance(device, torch.Tensor):
        device = device.device
    device = torch.device(device)
    if device.type in ("cuda", "xpu", "cpu"):
        return device.type
    raise ValueError(f"xpuinject_kernels: unsupported device type {device.type!r} (want cuda, xpu or cpu)")


def require_runnable(t: torch.Tensor, what: str) -> str:
    """Check that a kernel can run on t's device; return the backend name.

    Under TRITON_INTERPRET=1 the kernels run on CPU tensors (and on GPU tensors, copied through the
    host by the interpreter). Without it, CPU tensors cannot run a Triton kernel.
    """
    be = backend(t)
    if be == "cpu":
        if not is_interpret():
            raise RuntimeError(
                f"xpuinject_kernels: {what}: tensor is on the CPU; Triton kernels need a cuda or xpu device, "
                "or TRITON_INTERPRET=1 (set before triton is imported) to run in the interpreter"
            )
        if not _interpreter_fixed:
            _fix_interpreter()
    return be


_interpreter_fixed = False


def _fix_interpreter() -> None:
    """The interpreter's emulation fixes (_interpret.py), once, whoever bound the layers (inject,
    kernelize, or kernels.kernelize from transformers' use_kernels)."""
    global _interpreter_fixed
    from . import _interpret

    _interpret.apply()
    _interpreter_fixed = True


_CU_CACHE: Dict[tuple, int] = {}


def compute_units(device: torch.device) -> int:
    """SMs (CUDA) or Xe cores (XPU) of device; 8 under the interpreter or when unknown (a few
    programs per kernel, enough to exercise split paths)."""
    key = (device.type, device.index)
    n = _CU_CACHE.get(key)
    if n is None:
        n = _CU_CACHE[key] = _query_compute_units(device)
    return n


def _query_compute_units(device: torch.device) -> int:
    try:
        if device.type == "cuda" and not is_interpret():
            return int(torch.cuda.get_device_properties(device).multi_processor_count)
        if device.type == "xpu" and not is_interpret():
            props = torch.xpu.get_device_properties(device)
            for attr in ("gpu_subslice_count", "max_compute_units"):
                n = getattr(props, attr, None)
                if n:
                    return int(n)
    except (RuntimeError, AssertionError, AttributeError):
        pass
    return 8


# Per device: int32 counters that kernels reducing across programs count arrivals in (the last
# program to arrive finishes the work and puts its counter back to 0). Never freed or shrunk: a
# captured CUDA graph keeps the address it was recorded with.
SEMAPHORES = 1 << 16
_SEMAPHORES: Dict[tuple, torch.Tensor] = {}


def semaphores(device: torch.device, n: int) -> torch.Tensor:
    """The device's zeroed semaphore buffer (at least n counters)."""
    if n > SEMAPHORES:
        raise ValueError(f"xpuinject_kernels: a launch needs {n} semaphores, the buffer has {SEMAPHORES}")
    key = (device.type, device.index)
    t = _SEMAPHORES.get(key)
    if t is None:
        t = _SEMAPHORES[key] = torch.zeros(SEMAPHORES, dtype=torch.int32, device=device)
    return t


# Programmatic dependent launch (CUDA, compute capability 9.0 and later): a decode step is a chain
# of short launches, and with it each kernel's programs are resident before the one ahead of it
# has drained, waiting in `griddepcontrol.wait`, rather than launched after it. Every kernel that
# takes it waits before touching global memory (pdl_wait), so reads and writes stay ordered as on
# a plain stream. XPUINJECT_PDL=0 turns it off. See the CUDA programming guide, "Programmatic
# Dependent Launch and Synchronization", and triton's python/tutorials/11-programmatic-dependent-launch.py.
PDL_ENABLED = env_switch("XPUINJECT_PDL") is not False
_SM90: Dict[int, bool] = {}


def _sm90(device: torch.device) -> bool:
    """Whether a CUDA device is of compute capability 9.0 or later (Hopper, Blackwell), asked
    once per device: the launchers ask at every launch."""
    on = _SM90.get(device.index)
    if on is None:
        on = _SM90[device.index] = torch.cuda.get_device_capability(device)[0] >= 9
    return on


def pdl(device: torch.device) -> bool:
    """Whether launches on device use programmatic dependent launch."""
    if not PDL_ENABLED or device.type != "cuda" or is_interpret():
        return False
    return _sm90(device)


def fuse_norm(setting: Optional[bool], device: torch.device) -> bool:
    """Whether a norm runs inside the launch after it (a decode step's input norm in the QKV
    GEMV, the post-attention add + norm in the MoE router): `setting` when the user chose
    (True/False), else only on a GPU whose launches do not overlap (XPU, CUDA without
    programmatic dependent launch). On the H200, at Qwen3-30B-A3B's decode step, the fused step
    was 0.664-0.670 ms against 0.660-0.662 with programmatic dependent launch, and 0.682-0.684
    against 0.697-0.698 without it (benchmarks/profile_decode.py; BENCHMARKS.md): with it a
    norm's own launch costs about 1 us, less than what the fused kernel adds. The CPU (the
    interpreter) runs them apart, as the H200 does."""
    if setting is not None:
        return setting
    return device.type == "xpu" or (device.type == "cuda" and not pdl(device))


def pdl_kw(on: bool) -> Dict[str, bool]:
    """The launch option (only when on: other backends and the interpreter take no such option)."""
    return {"launch_pdl": True} if on else {}


def exact_rounding_kw() -> Dict[str, bool]:
    """Launch option for a kernel that rounds where torch rounds: without it the compiler narrows
    a bf16 x bf16 product rounded to bf16 into a bf16 multiply and contracts it with the add after
    it into one FMA, which skips that rounding (Triton's enable_fp_fusion; the interpreter drops it)."""
    return {"enable_fp_fusion": False}


@triton.jit
def pdl_wait(PDL: tl.constexpr):
    """First thing in a PDL kernel: wait until the launches before it have finished and their
    writes are visible, then let the next launch's programs become resident."""
    # The PTX of triton.language.extra.cuda's gdc_wait and gdc_launch_dependents, spelled out:
    # the XPU backend's Triton has no such module, and it resolves the names even here.
    if PDL:
        tl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host code. triton.cdiv is a constexpr_function in Triton 3.6: ~5 us per
    call from Python (argument unwrapping), and a decode step's launchers made about nine such
    calls (benchmarks/bench_host.py measures the launchers' host time)."""
    return -(-a // b)


def launch_config(config: Optional[Dict], allowed: Sequence[str], what: str,
                  flags: Sequence[str] = ()) -> Dict[str, int]:
    """Validate a kernel function's `config=` argument: launch constants (positive ints) keyed by
    names in `allowed`, and switches (0 or 1) keyed by names in `flags`, or None (the kernel's
    own choice) which gives {}. benchmarks/tune.py passes one to time that configuration."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"xpuinject_kernels: {what}: config must be a dict of launch constants, got {type(config).__name__}")
    bad = sorted(set(config) - set(allowed) - set(flags))
    if bad:
        raise ValueError(f"xpuinject_kernels: {what}: unknown config key(s) {', '.join(bad)} "
                         f"(want {', '.join(list(allowed) + list(flags))})")
    for k, v in config.items():
        if k in flags:
            if isinstance(v, bool) or v not in (0, 1):
                raise ValueError(f"xpuinject_kernels: {what}: config {k}={v!r}: want 0 or 1")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"xpuinject_kernels: {what}: config {k}={v!r}: want a positive integer")
    return dict(config)


def next_pow2(n: int) -> int:
    """Smallest power of 2 >= n (0 for 0, like triton.next_power_of_2), for host code."""
    return 0 if n <= 0 else 1 << (int(n) - 1).bit_length()


def has_descriptors() -> bool:
    """Whether this Triton has device-side tensor descriptors (`tl.make_tensor_descriptor`,
    Triton >= 3.4). Older releases -- PyPI's triton-xpu 3.3 among them, whose XPU lowering
    rejects even the experimental form (scripts/xpu_compile_check.py) -- use block pointers."""
    return hasattr(tl, "make_tensor_descriptor")


def tma_ok(t: torch.Tensor) -> bool:
    """Whether a tensor can back a tensor descriptor (`tl.make_tensor_descriptor`).

    Rules (triton's make_tensor_descriptor docstring): base pointer 16-byte
    aligned, last stride 1, every other stride a multiple of 16 bytes. On the H200 a misaligned
    stride gave SILENTLY WRONG results and the interpreter asserted, so callers must fall back to
    block pointers when this says False. A tensor with fewer than 2 dims never qualifies (descriptors
    are 2-5 D).
    """
    if t.dim() < 2 or t.dim() > 5:
        return False
    es = t.element_size()
    if t.data_ptr() % 16 != 0:
        return False
    if t.stride(-1) != 1:
        return False
    for d in range(t.dim() - 1):
        if t.size(d) > 1 and (t.stride(d) * es) % 16 != 0:
            return False
    return True


# Decode GEMVs load their weight tiles through host-side tensor descriptors (TMA bulk copies) on
# sm_90+ instead of each thread's pointer loads: on an H100 the Qwen3-30B-A3B-shaped decode step
# took 0.979x and 0.984x the pointer loads' time (benchmarks/ab_step.py). XPUINJECT_WEIGHT_TMA=0
# keeps the pointer loads; =1 also takes descriptors under the interpreter, which runs them.
WEIGHT_TMA = env_switch("XPUINJECT_WEIGHT_TMA")


def _has_host_descriptors() -> bool:
    """Whether this Triton takes host-side tensor descriptors as kernel arguments
    (triton.tools.tensor_descriptor, Triton >= 3.4)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True


_HOST_DESCRIPTORS = _has_host_descriptors()


def weight_tma(device: torch.device) -> bool:
    """Whether decode GEMVs on this device read their weights through tensor descriptors."""
    if WEIGHT_TMA is False or not _HOST_DESCRIPTORS:
        return False
    if is_interpret():
        return bool(WEIGHT_TMA)
    return device.type == "cuda" and _sm90(device)


# On XPU the decode GEMVs read their weight tiles through block pointers, which Intel's backend
# lowers to 2D block loads, where per-thread pointer loads become gathers (huggingface/kernels'
# xpu-kernels skill: descriptors preferred, block pointers also supported; PyPI's triton-xpu 3.3,
# the XPU Triton this repository compiles against, takes only block pointers). Not run on an XPU
# here. XPUINJECT_WEIGHT_BLOCK=0 keeps the pointer loads there; =1 takes block pointers on any
# device (CUDA too, ahead of descriptors) and under the interpreter.
WEIGHT_BLOCK = env_switch("XPUINJECT_WEIGHT_BLOCK")


def weight_block_ptr(device: torch.device) -> bool:
    """Whether decode GEMVs on this device read their weight tiles through block pointers."""
    if WEIGHT_BLOCK is not None:
        return WEIGHT_BLOCK
    return device.type == "xpu" and not is_interpret()


@triton.jit
def block_ptr(w_ptr, rows, cols, stride_r, stride_c, r0, c0, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """A block pointer to the [BLOCK_R, BLOCK_C] tile at (r0, c0) of the [rows, cols] weight at
    w_ptr, its columns the contiguous axis (weight_block_ptr). Callers load it with boundary checks
    and zero padding, so rows and columns past the weight read as zeros."""
    return tl.make_block_ptr(w_ptr, shape=(rows, cols), strides=(stride_r, stride_c), offsets=(r0, c0),
                             block_shape=(BLOCK_R, BLOCK_C), order=(1, 0))


def weight_desc(w: torch.Tensor, block: Sequence[int]):
    """A host-side tensor descriptor over w (2-5 D, tma_box_ok) with box `block`; out-of-bounds
    rows and columns load as zeros. Made at each launch, not kept: a descriptor holds its tensor,
    so a cache of them would keep a deleted model's weights on the device. (Under the graph runtime
    only the capture makes them.)"""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(w, list(block))


def tma_box_ok(w: torch.Tensor, block: Sequence[int], starts: Sequence[int] = ()) -> bool:
    """Whether w can be read through a descriptor with box `block`: tma_ok, a K-major last axis,
    every box side at most 256 elements (the TMA box limit) with a last side of 16 bytes or more,
    and each column offset in `starts` a box may begin at (besides multiples of the box's width)
    on 16 bytes: a gated weight's up half, a head's width."""
    es = w.element_size()
    return (tma_ok(w) and len(block) == w.dim() and all(0 < b <= 256 for b in block)
            and block[-1] * es >= 16 and all(c * es % 16 == 0 for c in starts))


_allocator_set = False


def ensure_allocator(device: torch.device) -> None:
    """On CUDA, descriptors built in-kernel need global scratch from triton's allocator.

    Set a torch-backed allocator unless someone already installed one. XPU lowers descriptors to
    2D block loads and the interpreter needs no scratch, so this is a no-op there.
    """
    global _allocator_set
    if backend(device) != "cuda" or is_interpret():
        return
    try:
        from triton.runtime import _allocation

        current = _allocation._allocator.get()
        if not isinstance(current, _allocation.NullAllocator):
            return
    except (ImportError, AttributeError):
        if _allocator_set:
            return

    def _alloc(size: int, alignment: int, stream: Optional[int]):
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(_alloc)
    _allocator_set = True


# ---------------------------------------------------------------------------------------------
# Row-wise kernels (RMSNorm, RoPE): warps by row width.
# ---------------------------------------------------------------------------------------------


def rowwise_num_warps(block: int) -> int:
    """num_warps for a one-row-per-program kernel of `block` elements.

    Rule of thumb from Triton's layer-norm tutorial and Liger: ~256 elements per warp keeps every
    lane busy with a few vector loads while a 4096-wide row still fits one program; capped at 16
    (XPU allows 32 but a row kernel is bandwidth bound and more warps only add reduction cost).
    """
    return max(1, min(16, block // 256))


# ---------------------------------------------------------------------------------------------
# GEMM autotune configs per backend.
# ---------------------------------------------------------------------------------------------

# XPU register file: grf_mode "256" gives each hardware thread 256 GRFs of 64 bytes on Xe-HPC
# (Data Center GPU Max); the xpu-kernels skill asks for large GRF mode on every GEMM config. A
# Triton warp maps to one hardware thread, so a program of num_warps warps owns num_warps * 16 KiB
# of registers.
XPU_GRF_BYTES_PER_THREAD = 256 * 64
# Only part of the register file can hold tiles: addresses, loop state and the epilogue need the
# rest. 0.75 keeps the 256x256x32/32-warp config (the skill's largest, 288 KiB of tiles vs 512 KiB)
# and drops the 256x256 swiglu variant (two accumulators, 544 KiB) that would spill.
XPU_TILE_FRACTION = 0.75

# Hopper (H100/H200) shared memory per block usable by one kernel: 227 KiB.
CUDA_SMEM_BYTES = 227 * 1024


def _cfg(kw: Dict, num_warps: int, num_stages: int) -> triton.Config:
    return triton.Config(dict(kw), num_warps=num_warps, num_stages=num_stages)


def interpret_gemm_config(m: int, n: int) -> triton.Config:
    """The interpreter's GEMM tile: it runs every program in Python, so its cost is the program
    count times the steps of the K loop. Small problems keep the 16x32x32 tile (several N tiles,
    a K loop: the paths the tests check); a real model's projections take wider tiles, and an
    lm_head (N = 49152) 1024x128 ones: 25x fewer program-steps, 1.9 s instead of 48 s a token."""
    if n > 4096:
        bn, bk = 1024, 128
    elif n > 1024:
        bn, bk = 256, 64
    else:
        bn, bk = 32, 32
    return _cfg({"BLOCK_M": 16 if m <= 256 else 64, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_SIZE_M": 2}, 4, 1)


def gemm_configs(be: str, *, n_b_tiles: int = 1) -> List[triton.Config]:
    """GEMM configs (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_SIZE_M + warps/stages) for a backend.

    n_b_tiles: how many B tiles (and accumulators) one program keeps live per step — 2 for the
    fused swiglu epilogue (gate and up), used only by the pruners (see `gemm_prune`).
    """
    if is_interpret():
        # One small config: tl.dot needs every dim >= 16; 16x32x32 keeps programs few on tiny tests.
        return [_cfg({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_SIZE_M": 2}, 4, 1)]
    if be == "xpu":
        # The xpu-kernels skill: large tiles + grf_mode "256" + many warps for big M; 32/64-row
        # tiles for skinny M (decode); GROUP_SIZE_M 4 swizzling. grf_mode is a compiler option of
        # the XPU backend only: on CUDA it would be rejected as an unknown kernel argument, hence
        # XPU-only.
        big = [
            ({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_SIZE_M": 4}, 32, 4),
            ({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_SIZE_M": 4}, 32, 4),
            ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_SIZE_M": 4}, 32, 4),
            ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_SIZE_M": 4}, 16, 4),
            ({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_SIZE_M": 4}, 16, 4),
            ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 4}, 8, 3),
            ({"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 4}, 8, 3),
            ({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 1}, 4, 3),
        ]
        return [_cfg({**kw, "grf_mode": "256"}, w, s) for kw, w, s in big]
    # CUDA, sized for Hopper (132 SMs, 227 KiB smem): 128x128 / 128x256 / 256x128 tiles with 3-4
    # stages for prefill, narrow-M tiles for decode (M <= 16 would waste 7/8 of a 128-row tile).
    # The first five prefill configs reached 0.72-0.94x cuBLAS on Llama-3.2-1B's K=2048
    # projections and 0.80-0.95x at M=16384 (docs/results/2026-11-29-h200/bench-v1.csv); the
    # 128x256/s4, 256x128, 128x128/w4/s4, 128x128x128 and 64x256 tiles were added for those
    # shapes. Decode (M <= 64) reached 0.46-0.78x cuBLAS on the deep-K down and o projections
    # with at most N/64 programs (K=8192, N=2048: 32 programs for 132 SMs): the 16- and 32-wide
    # N tiles with 256-512-deep K steps give 64-128 programs, each streaming its weight columns.
    # Outcome (bench-v2.csv, same folder): 8B qkv M=16384 0.91x -> 1.05x cuBLAS, 1B swiglu
    # M=16384 0.75x -> 0.89x of a bare matmul, 1B down M=1 0.46x -> 0.69x; 1B qkv/o at M=2048 did
    # not move (0.71x, 0.91x) and are routed to cuBLAS by the planner instead.
    cfgs = [
        ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 8, 3),
        ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 8, 4),
        ({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 8, 3),
        ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 8, 4),
        ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 4, 3),
        ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 4, 4),
        ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_SIZE_M": 8}, 8, 3),
        ({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 4, 4),
        ({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 8, 3),
        ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_SIZE_M": 8}, 4, 4),
        ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_SIZE_M": 8}, 4, 4),
        ({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 256, "GROUP_SIZE_M": 8}, 4, 3),
        ({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_SIZE_M": 1}, 4, 4),
        ({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_SIZE_M": 1}, 4, 3),
        ({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "GROUP_SIZE_M": 1}, 4, 4),
        ({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 512, "GROUP_SIZE_M": 1}, 4, 3),
        ({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 512, "GROUP_SIZE_M": 1}, 4, 4),
    ]
    return [_cfg(kw, w, s) for kw, w, s in cfgs]


# fp32 accumulator elements one CUDA thread may hold: beyond 128 (of 255 registers) the tile
# spills (a 128x128 swiglu tile at 4 warps holds two accumulators: 256 per thread).
CUDA_ACC_PER_THREAD = 128


def gemm_tile_bytes(cfg: triton.Config, be: str, n_b_tiles: int, elem_bytes: int = 2) -> int:
    """Bytes one program keeps live for a config: fp32 accumulators + one A/B stage (XPU registers),
    or A/B tiles times num_stages (CUDA shared memory)."""
    k = cfg.kwargs
    bm, bn, bk = k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"]
    ab = (bm * bk + n_b_tiles * bk * bn) * elem_bytes
    if be == "xpu":
        return n_b_tiles * bm * bn * 4 + ab
    return ab * max(1, cfg.num_stages)


def gemm_prune(be: str, n_b_tiles: int) -> Callable:
    """An `early_config_prune` hook: drop configs that would spill (XPU register file) or not fit
    (CUDA shared memory), and tiles far taller than M (a 256-row tile for a decode step of M=1).
    Always keeps at least one config (the smallest footprint)."""

    def prune(configs: Iterable[triton.Config], named_args: Dict, **kwargs) -> List[triton.Config]:
        configs = list(configs)
        if len(configs) <= 1:
            return configs
        m = named_args.get("M", kwargs.get("M"))
        n = named_args.get("N", kwargs.get("N"))
        k = named_args.get("K", kwargs.get("K"))
        keep = []
        for c in configs:
            need = gemm_tile_bytes(c, be, n_b_tiles)
            if be == "xpu":
                budget = c.num_warps * XPU_GRF_BYTES_PER_THREAD * XPU_TILE_FRACTION
            else:
                budget = CUDA_SMEM_BYTES
            if need > budget:
                continue
            if be != "xpu" and n_b_tiles * c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] > CUDA_ACC_PER_THREAD * 32 * c.num_warps:
                continue
            # M-aware: a tile more than 4x taller than the (power-of-2 rounded) M only burns
            # bandwidth and registers on masked rows.
            if isinstance(m, int) and c.kwargs["BLOCK_M"] > 4 * max(16, next_pow2(m)):
                continue
            # N- and K-aware likewise: small layers (LeViT's 128..768-wide projections) gain
            # nothing from tiles wider than the matrix, and every surviving config is one more
            # compile + benchmark on first call (the LeViT-128S eval ran out of its 70 s step
            # while tuning, BENCHMARKS.md 2026-11-29).
            if isinstance(n, int) and c.kwargs["BLOCK_N"] > 2 * max(16, next_pow2(n)):
                continue
            if isinstance(k, int) and c.kwargs["BLOCK_K"] > max(16, next_pow2(k)):
                continue
            keep.append(c)
        if not keep:
            keep = [min(configs, key=lambda c: gemm_tile_bytes(c, be, n_b_tiles))]
        return keep

    return prune


# The launch constants a GEMM class takes when no tuned config covers it, CUDA, by token count M:
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), the first that passes gemm_prune. M <= 16
# runs gemv.py's split-K kernel on a packed weight, these tiles on a weight.t() view (a tied
# lm_head): within 3 % of the autotuner's pick at every projection of Llama-3.2-1B and
# Llama-3.1-8B on the H200 (32x512 tiles for the deep down projections, 64x256 elsewhere;
# benchmarks/bench_decode_step.py, docs/results/2026-12-01-h200/decode-step-kernels.json).
# Larger M: the prefill tiles that led the 2026-11-29 sweep (docs/results/2026-11-29-h200).
_CUDA_GEMM_HEURISTIC = (
    (16, lambda k: [(16, 32, 512, 4, 3)] if k >= 8192 else [(16, 64, 256, 4, 3)]),
    (64, lambda k: [(64, 64, 128, 4, 4), (16, 64, 256, 4, 3)]),
    (None, lambda k: [(128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 3)]),
)
# 64 < M <= 512 (a short prompt's prefill): the widest of these tiles whose grid still gives each
# of a Hopper's 132 SMs half a wave, else the narrowest. One tile for every shape in this range was
# 1.22x the sweep's best on average (up to 1.94x on an 8B head at M = 512); this choice is 1.002x
# on the 53 of those 59 classes whose sweep timed it (benchmarks/heuristic_check.py over
# docs/results/2026-12-06-h100/tune/tune.json and docs/results/2026-12-02-h200/tune*.json).
_CUDA_GEMM_MID = ((128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (64, 128, 64, 4, 4), (64, 64, 128, 4, 4),
                  (64, 32, 256, 4, 3))
_CUDA_GEMM_MID_PROGRAMS = 66


def gemm_heuristic(be: str, m: int, n: int, k: int, n_b_tiles: int = 1) -> triton.Config:
    """The GEMM config of a class no tuned config covers, from its shape and without benchmarking:
    one of gemm_configs(be) that gemm_prune keeps (so it fits the registers / shared memory), the
    preferred one for M on CUDA, the first survivor (the list's order) on XPU."""
    keep = gemm_prune(be, n_b_tiles)(gemm_configs(be, n_b_tiles=n_b_tiles), {"M": m, "N": n, "K": k})

    def kept(bm, bn, bk, w, st):
        return next((c for c in keep if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps,
                                         c.num_stages) == (bm, bn, bk, w, st)), None)

    if be == "cuda" and 64 < m <= 512:
        mid = [c for c in (kept(*t) for t in _CUDA_GEMM_MID) if c is not None]
        for c in mid:
            if cdiv(m, c.kwargs["BLOCK_M"]) * cdiv(n, c.kwargs["BLOCK_N"]) >= _CUDA_GEMM_MID_PROGRAMS:
                return c
        if mid:
            return mid[-1]
    if be == "cuda":
        for top, want in _CUDA_GEMM_HEURISTIC:
            if top is None or m <= top:
                c = next((c for c in (kept(*t) for t in want(k)) if c is not None), None)
                if c is not None:
                    return c
                break
    return keep[0]


_autotuned: Dict[tuple, object] = {}


def autotuned(name: str, jit_fn, be: str, configs: List[triton.Config], key: List[str],
              prune: Optional[Callable] = None, restore_value: Optional[List[str]] = None):
    """A per-backend `triton.autotune` wrapper around one @triton.jit function, built once.

    Building it lazily per backend (instead of decorating at import) lets one source serve CUDA,
    XPU and the interpreter: XPU configs carry grf_mode, which the CUDA backend would reject.
    restore_value: arguments a launch updates in place from their own value (a cache counter),
    which the tuner puts back after each config it times, so the launch it tunes updates them once.
    """
    k = (name, be, is_interpret())
    fn = _autotuned.get(k)
    if fn is None:
        prune_by = {"early_config_prune": prune} if prune is not None else None
        # cache_results: the winning config per key is stored in Triton's on-disk cache
        # (TRITON_CACHE_DIR), so a shape is tuned once per machine, not once per process --
        # the eval of a model with many GEMM shapes (LeViT-128S: ~60) otherwise spends its
        # first minute tuning (BENCHMARKS.md 2026-11-29). Keys are bucketed (M to a power of
        # 2), so the number of tunings per model is bounded too.
        fn = triton.autotune(configs=configs, key=key, prune_configs_by=prune_by, restore_value=restore_value,
                             cache_results=not is_interpret())(jit_fn)
        _count_tuning(fn, name)
        _autotuned[k] = fn
    return fn


def _count_tuning(fn, name: str) -> None:
    """Count what the autotuner does (gpus.tuning_report): each new problem key it resolves
    ("autotune.key.<name>"), whether by timing its configs ("autotune.benchmarked", and each
    config timed) or from Triton's disk cache. Hooks the two Autotuner methods that run only
    then (triton/runtime/autotuner.py), so a launch of a known key costs nothing more."""
    bench, disk = fn._bench, getattr(fn, "check_disk_cache", None)

    def timed(*args, **kwargs):
        count("autotune.configs_timed")
        return bench(*args, **kwargs)

    def resolved(tuning_key, configs, bench_fn):
        before = launch_counts["autotune.configs_timed"]
        hit = disk(tuning_key, configs, bench_fn)
        count(f"autotune.key.{name}")
        if launch_counts["autotune.configs_timed"] > before:
            count("autotune.benchmarked")
        return hit

    fn._bench = timed
    if disk is not None:
        fn.check_disk_cache = resolved
