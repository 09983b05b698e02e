"""xpuinject Triton kernels (norm, rope, gemm, attention) and kernel-hub layers.

Importable without a GPU: kernels compile on first launch. Relative imports only (the package is
copied into kernel-hub variant folders under a model-specific name).

Public ops:
  rms_norm(x, weight, eps) -> y
  add_rms_norm(x, residual, weight, eps) -> (new_residual, y)
  apply_rope(q, k, cos, sin, inplace=False) -> (q_rot, k_rot)
  gemm(x, w, bias=None, residual=None, epilogue="none", use_descriptors=None) -> out
      epilogue in GEMM_EPILOGUES = ("none", "bias", "swiglu", "hardswish", "residual")
`layers` holds the kernel-hub layer classes (RMSNorm, SwiGLUMLP, Linear, LinearBN, BNLinear,
Attention, DecoderLayer).
  flash_attention_prefill, decode_attention, attention_forward (transformers AttentionInterface)
`runtime` runs a model (stock or injected) with captured device graphs: `runtime.generate(model,
input_ids, ...)` and `runtime.GraphedForward(model)`.
"""

from . import _backend  # noqa: F401
from . import layers  # noqa: F401
from . import runtime  # noqa: F401
from .gemm import EPILOGUES as GEMM_EPILOGUES  # noqa: F401
from .gemm import gemm  # noqa: F401
from .rmsnorm import add_rms_norm, rms_norm  # noqa: F401
from .rope import apply_rope  # noqa: F401
from .attention import attention_forward, decode_attention, flash_attention_prefill  # noqa: F401
