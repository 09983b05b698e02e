"""xpuinject Triton kernels (norm, rope, gemm, attention) and kernel-hub layers.

Importable without a GPU: kernels compile on first launch. Relative imports only (the package is
copied into kernel-hub variant folders under a model-specific name).

Public ops:
  rms_norm(x, weight, eps) -> y
  add_rms_norm(x, residual, weight, eps) -> (new_residual, y)
  apply_rope(q, k, cos, sin, inplace=False) -> (q_rot, k_rot)
  gemm(x, w, bias=None, residual=None, epilogue="none", use_descriptors=None) -> out
      epilogue in GEMM_EPILOGUES = ("none", "bias", "swiglu", "hardswish", "residual")
  rms_norm, add_rms_norm, apply_rope and gemm take `config=` (launch constants, for tuning).
`layers` holds the kernel-hub layer classes (RMSNorm, SwiGLUMLP, Linear, LinearBN, BNLinear,
Attention, DecoderLayer).
  flash_attention_prefill, decode_attention, attention_forward (transformers AttentionInterface)
Checking support (tests, benchmarks): set_poison(on) -> previous setting: NaN-fill every output
the kernels allocate, so an element a kernel fails to write fails any comparison;
apply_interpreter_fixes() makes Triton's CPU interpreter (TRITON_INTERPRET=1) compute as the GPUs
do (_interpret.py).
"""

from . import _backend  # noqa: F401
from . import layers  # noqa: F401
from .gemm import EPILOGUES as GEMM_EPILOGUES  # noqa: F401
from .gemm import gemm  # noqa: F401
from .rmsnorm import add_rms_norm, rms_norm  # noqa: F401
from .rope import apply_rope  # noqa: F401
from .attention import attention_forward, decode_attention, flash_attention_prefill  # noqa: F401
from ._backend import set_poison  # noqa: F401
from ._interpret import apply as apply_interpreter_fixes  # noqa: F401
