"""xpuinject kernel package: Triton kernels (norm, rope, gemm, attention), the kernel-hub layers
built on them, and the injection that binds the layers into a transformers model.

Importable without a GPU: kernels compile on first launch. Relative imports only (the package is
copied into kernel-hub variant folders under a model-specific name).

Injection (injection.py):
  inject(model, packed=None, *, revision=None, token=None, plan=None, check_only=False) -> summary
      carries out the package's plan.yaml; `packed` is a folder or Hub repo of offline-packed weights
  kernelize(model, *, use_kernels="auto", mode=None) -> summary
      no plan: binds every supported module; the layers pack the model's own weights
  mark_transformers_classes(), then kernel_mapping(repo, arch) for kernels.use_kernel_mapping, or
      kernel_config_mapping(repo, arch) for transformers' own route,
      from_pretrained(..., use_kernels=True, kernel_config=KernelConfig(kernel_config_mapping(repo, arch)))
  supported_bindings(model), load_plan(path=None), InjectError, Released
Ops (each a torch custom op, torch.ops.<package module name>.<op>, see _ops.py):
  rms_norm(x, weight, eps) -> y
  add_rms_norm(x, residual, weight, eps) -> (new_residual, y)
  apply_rope(q, k, cos, sin, inplace=False) -> (q_rot, k_rot)
  gemm(x, w, bias=None, residual=None, epilogue="none", use_descriptors=None) -> out
      epilogue in GEMM_EPILOGUES (contract.json: "none", "bias", "swiglu", "geglu", "geglu_erf", ...)
  rms_norm, add_rms_norm, apply_rope and gemm take `config=` (launch constants, for tuning).
  flash_attention_prefill, decode_attention, attention_forward (transformers AttentionInterface)
`layers` holds the kernel-hub layer classes (RMSNorm, SwiGLUMLP, Linear, LMHead, LinearBN, BNLinear,
ConvBN, Attention, DecoderLayer).
Checking support (tests, benchmarks): set_poison(on) -> previous setting: NaN-fill every output
the kernels allocate, so an element a kernel fails to write fails any comparison;
apply_interpreter_fixes() makes Triton's CPU interpreter (TRITON_INTERPRET=1) compute as the GPUs
do (_interpret.py).
`precompile.ahead(run)` compiles the kernels a workload launches on a thread pool, from a dry run
of it, so its real run starts compiled (a cold process otherwise compiles them one at a time).
`runtime` runs a model (stock or injected) with captured device graphs: `runtime.generate(model,
input_ids, ...)` and `runtime.GraphedForward(model)`.
Per-GPU data (gpus.py, gpus/<gpu>.json): launch configs tuned on a GPU model replace autotuning
there; tuning_report() -> what this process tuned (the eval records it).
"""

from . import _backend  # noqa: F401
from . import layers, precompile, runtime
from ._backend import set_poison
from ._interpret import apply as apply_interpreter_fixes
from .attention import attention_forward, decode_attention, flash_attention_prefill
from .gemm import EPILOGUES as GEMM_EPILOGUES
from .gemm import gemm
from .gpus import tuning_report
from .injection import (InjectError, inject, kernel_config_mapping, kernel_mapping, kernelize, load_plan,
                        mark_transformers_classes, supported_bindings)
from .packing import Released
from .rmsnorm import add_rms_norm, rms_norm
from .rope import apply_rope

__all__ = [
    "inject",
    "kernelize",
    "supported_bindings",
    "mark_transformers_classes",
    "kernel_mapping",
    "kernel_config_mapping",
    "load_plan",
    "InjectError",
    "Released",
    "layers",
    "runtime",
    "precompile",
    "rms_norm",
    "add_rms_norm",
    "apply_rope",
    "gemm",
    "GEMM_EPILOGUES",
    "flash_attention_prefill",
    "decode_attention",
    "attention_forward",
    "set_poison",
    "apply_interpreter_fixes",
    "tuning_report",
]
