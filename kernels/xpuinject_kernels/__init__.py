"""xpuinject Triton kernels (norm, rope, gemm, attention) and kernel-hub layers.

Importable without a GPU: kernels compile on first launch. Relative imports only (the package is
copied into kernel-hub variant folders under a model-specific name).
"""

from . import _backend  # noqa: F401
