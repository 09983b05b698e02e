"""Fixes for Triton 3.6's CPU interpreter (TRITON_INTERPRET=1), applied by `apply()`.

The interpreter is how the kernels run on a machine without a GPU (CI, and `xpuinject eval
--device cpu`). Three of its emulations disagree with compiled kernels and one repeats work at
every helper call; each patch below changes only the emulation, never a kernel, and is a no-op
unless the interpreter is on.
The package's inject and kernelize apply them for a model on the CPU; the kernel tests apply
them in conftest.py.

The interpreter holds tensors as numpy arrays, so these patches work on numpy arrays too; they
take numpy from the interpreter module (`interp.np`) rather than importing it: the package
itself needs nothing beyond torch, triton and kernels' own dependencies, and numpy is there
exactly when Triton's interpreter is.
"""

from __future__ import annotations

import torch


def _patch_interpreter_bf16_rounding() -> None:
    """Make the interpreter round fp32 -> bf16 to nearest-even, as the GPUs do.

    triton 3.6's interpreter lowers the default (RTNE) fp32->bf16 downcast through `cast_impl` with
    no rounding mode, which TRUNCATES (runtime/interpreter.py, create_fp_trunc -> cast_impl ->
    _convert_float(..., None)). Compiled kernels on CUDA/XPU round to nearest-even (semantic.cast:
    "For fp downcasting default rounding mode should be RTNE"). Without this, every bf16 output in
    the interpreter is up to 1 ulp low and a bf16 oracle comparison would need a loose tolerance.
    Only the emulation changes; kernels are untouched. test_rmsnorm checks the patch is in effect.
    """
    import triton.language as tl
    from triton.runtime import interpreter as interp

    np = interp.np

    builder = interp.InterpreterBuilder
    if getattr(builder, "_xpuinject_rtne", False):
        return
    orig = builder.create_fp_trunc

    def create_fp_trunc(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            f32 = torch.from_numpy(np.array(src.data, dtype=np.float32, copy=True))  # keeps 0-d shape
            data = f32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return interp.TensorHandle(data, dst_type.scalar)
        return orig(self, src, dst_type)

    builder.create_fp_trunc = create_fp_trunc
    builder._xpuinject_rtne = True


def _patch_interpreter_index_numpy2() -> None:
    """Let `range(0, N, BLOCK)` over a runtime int run in the interpreter with numpy >= 2.4.

    The interpreter passes scalar kernel arguments as 1-element arrays (interpreter.py
    _implicit_cvt) and converts them with `int(arr)` in tensor.__index__ (_patch_lang_tensor);
    numpy 2.4 removed int() of a 1-element 1-d array ("only 0-dimensional arrays can be converted
    to Python scalars"), so every runtime-bounded for-loop fails. Compiled kernels are unaffected.
    We keep `for` loops in kernels (not `while`) because only `for` loops get software pipelining.
    """
    from triton.runtime import interpreter as interp

    np = interp.np

    if getattr(interp, "_xpuinject_index_patched", False):
        return
    orig = interp._patch_lang_tensor

    def _index(self):
        data = np.asarray(self.handle.data)
        if data.size != 1:
            raise TypeError(f"only single-element tensors can be used as an index, got shape {data.shape}")
        return int(data.reshape(-1)[0])

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    interp._patch_lang_tensor = patched
    interp._xpuinject_index_patched = True


def _patch_interpreter_bf16_dot() -> None:
    """Make the interpreter's tl.dot read bf16 operands as numbers.

    The interpreter stores bf16 tensors as their uint16 bit patterns and its create_dot calls
    np.matmul on them directly (interpreter.py create_dot converts only fp8), so a bf16 dot
    multiplies bit patterns (errors ~1e10). We widen bf16 operands to fp32 first (exact), which
    is what tensor cores / DPAS do: exact products, fp32 accumulation.
    """
    import triton.language as tl
    from triton.runtime import interpreter as interp

    np = interp.np

    builder = interp.InterpreterBuilder
    if getattr(builder, "_xpuinject_bf16_dot", False):
        return
    orig = builder.create_dot

    def widen(h):
        if h.dtype.scalar == tl.bfloat16:
            bits = np.asarray(h.data).astype(np.uint32) << 16
            return interp.TensorHandle(bits.view(np.float32), tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return orig(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    builder.create_dot = create_dot
    builder._xpuinject_bf16_dot = True


def _patch_interpreter_device_calls() -> None:
    """Skip the interpreter's re-patching of triton.language at every device-function call made
    inside a launch that already patched it.

    triton 3.6's interpreter patches triton.language's builtins (inspect.getmembers over tl,
    tl.tensor, tl.math, ...) once per launch (GridExecutor.__call__) and again at every call of a
    @triton.jit helper (InterpretedFunction.__call__ -> _patch_lang), for every program of the
    grid: about a millisecond a call, most of an interpreted launch whose programs call helpers.
    Inside a launch, once a module is patched a second patch sets what is already set: a helper
    is patched as before only when it sees a language module (tl.core, for triton.language's own
    helpers such as tl.sum) that nothing in this launch has patched yet.
    """
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter as interp

    if getattr(interp, "_xpuinject_calls", False):
        return
    langs = (tl, tl.core)
    patched = []  # per nested launch: ids of the language modules patched so far in it
    patch_lang = interp._patch_lang  # GridExecutor and InterpretedFunction look it up as a global

    def lang_ids(fn):
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in langs}

    def patch_once(fn):
        ids = lang_ids(fn)
        if patched and ids and ids <= patched[-1]:
            return interp._LangPatchScope()  # all set already: nothing to set, nothing to restore
        if patched:
            patched[-1] |= ids
        return patch_lang(fn)

    grid_call = interp.GridExecutor.__call__

    def launch(self, *args, **kwargs):
        patched.append(set())
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            patched.pop()

    interp._patch_lang = patch_once
    interp.GridExecutor.__call__ = launch
    interp._xpuinject_calls = True


def apply() -> None:
    """Apply every interpreter fix (idempotent; nothing happens unless TRITON_INTERPRET=1)."""
    from . import _backend

    if not _backend.is_interpret():
        return
    _patch_interpreter_bf16_rounding()
    _patch_interpreter_index_numpy2()
    _patch_interpreter_bf16_dot()
    _patch_interpreter_device_calls()
